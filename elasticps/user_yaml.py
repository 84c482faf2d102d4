"""YAML that a user wrote (job specs, dataset schemas), read with bounds.

PyYAML's safe loader runs no code, but three inputs still hurt the process that reads them:

* aliases that expand: nine aliases of nine aliases of ... ("billion laughs") is a few hundred
  bytes whose value any walk (a validation, an error message, a JSON dump) visits 10^9 times.
  The value is measured as if every alias were written out, and refused when aliases add more
  than :data:`MAX_ALIAS_NODES` nodes; an alias that refers to its own ancestor is refused too.
  A few anchors shared by a few entries (``env: *common``) stay well inside the bound.
* nesting deeper than :data:`MAX_DEPTH`: PyYAML's composer recurses once per level, so
  20,000 ``[`` would end in a ``RecursionError``.
* bytes that are not UTF-8, and scalars that their type cannot hold (an integer of 5,000
  digits, a date 2024-13-45), which PyYAML reports as a bare ``ValueError``.

Each is a :class:`~elasticps.errors.ConfigError` that names the file and what is wrong, raised
before the value is built.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from elasticps.errors import ConfigError

MAX_DEPTH = 100  # levels of nested mappings and lists; job specs and schemas use under ten
MAX_ALIAS_NODES = 10_000  # nodes that aliases may add to a document, counted written out
# Sizes stop growing here (far above any document's distinct nodes): doubling aliases would
# otherwise make numbers of thousands of digits.
_SATURATED = 10**12


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, refusing nesting deeper than :data:`MAX_DEPTH` while it composes."""

    def __init__(self, text: str, where: str) -> None:
        super().__init__(text)
        self.where = where
        self.depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise ConfigError(f"{self.where} nests mappings and lists more than {MAX_DEPTH} "
                                  f"levels deep (at line {line}); a job spec or schema needs "
                                  "a few")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def load_user_yaml(data: str | bytes, where: str) -> Any:
    """The value of the YAML document ``data`` (``where`` names it in errors: a path), or a
    :class:`ConfigError` when it is not UTF-8, not YAML, too deep, or expands too far."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{where} is not UTF-8 text: byte {exc.start} is "
                              f"0x{data[exc.start]:02x} ({exc.reason}); save it as UTF-8"
                              ) from None
    else:
        text = data
    try:
        loader = _BoundedLoader(text, where)  # the reader refuses control characters here
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_expansion(node, where)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from None
    except ConfigError:
        raise  # the bounds above, already naming the file
    except ValueError as exc:  # a scalar its type cannot hold: a 5000-digit int, 2024-13-45
        raise ConfigError(f"{where} holds a value that cannot be read: {exc}") from None


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: Node, where: str) -> None:
    """Refuse a document whose aliases, written out, add more than MAX_ALIAS_NODES nodes, or
    that holds itself. One pass over the distinct nodes."""
    sizes: dict[int, int] = {}  # id(node) -> its nodes written out, at most _SATURATED
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = min(1 + sum(sizes[id(c)] for c in _children(node)), _SATURATED)
            continue
        if key in sizes:
            continue
        open_nodes.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_nodes:
                raise ConfigError(f"{where}: an alias at line {child.start_mark.line + 1} "
                                  "refers to a mapping or list that holds it (a recursive "
                                  "alias); write the value out")
            if id(child) not in sizes:
                stack.append((child, False))
    added = sizes[id(root)] - len(sizes)
    if added > MAX_ALIAS_NODES:
        raise ConfigError(f"{where}: its aliases (*name) expand to more than "
                          f"{MAX_ALIAS_NODES:,} nodes beyond what is written (nested aliases "
                          "of aliases?); write the values out or use fewer aliases")


__all__ = ["MAX_ALIAS_NODES", "MAX_DEPTH", "load_user_yaml"]
