"""The sparse side of a step: which rows a batch needs, one pull per table, one gradient per table.

:class:`SparseTables` groups a model's pserver-backed layers by table. For a batch it asks every
layer that reads columns which ids it will look up (``layer.ids_for``), unions them per table,
pulls each table's unique ids once (:meth:`SparseTables.pull`, on the prefetch thread when
prefetching) and installs the rows as one :class:`TableRows` per table (:meth:`install`): a leaf
tensor every layer of the table gathers from, with each layer's positions already computed. The
ids a layer derives are the ids its forward pass looks up, so a prefetch can never miss; the
gradients of all layers and repeated ids add up in the one leaf, pushed as ``(ids, grad)``.

For tables that evict by show/click score (``counted``), the pull also counts, per unique id,
the examples of the batch that show it and, with binary labels, the positive ones among them
(:func:`show_click_counts`); the push carries them next to the gradient.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from elasticps.data.batch import Batch
from elasticps.errors import ConfigError
from elasticps.trainer.api import ParameterClient
from elasticps.trainer.device import CPU, Placement
from elasticps.trainer.sparse import SparseLayer


@dataclass(frozen=True)
class PulledRows:
    """One table's rows for one batch, as pulled (numpy, made on any thread)."""

    ids: np.ndarray  # sorted unique int64 [U]
    rows: np.ndarray  # float32 [U, dim]
    positions: Mapping[SparseLayer, np.ndarray]  # each deriving layer's ids as indexes into ids
    counts: tuple[np.ndarray, np.ndarray] | None = None  # SCORE tables: (shows, clicks) per id


def show_click_counts(inverse: np.ndarray, examples: np.ndarray, positive: np.ndarray | None,
                      unique: int) -> tuple[np.ndarray, np.ndarray]:
    """Per unique id, how many examples show it (an example showing an id twice counts once)
    and how many of those are positive; ``inverse`` and ``examples`` give each looked-up id's
    unique index and example, ``positive`` each example's label (None: no clicks known)."""
    pairs = np.unique(examples.astype(np.int64) * unique + inverse)
    index = pairs % unique
    shows = np.bincount(index, minlength=unique).astype(np.float32)
    if positive is None:
        return shows, np.zeros(unique, np.float32)
    clicked = positive[pairs // unique]
    return shows, np.bincount(index[clicked], minlength=unique).astype(np.float32)


def positive_examples(batch: Batch) -> np.ndarray | None:
    """Each example's click (label > 0.5) for a batch with one 0/1 label per example; None
    when the labels are not one per example (shows are then counted without clicks)."""
    label = batch.label
    if label.ndim > 2 or (label.ndim == 2 and label.shape[1] != 1):
        return None
    return np.asarray(label).reshape(-1) > 0.5


class TableRows:
    """One table's rows for one batch as a leaf tensor that every layer of the table uses."""

    def __init__(self, pulled: PulledRows, batch: Batch | None, requires_grad: bool,
                 placement: Placement = CPU) -> None:
        self.ids = pulled.ids
        self.batch = batch
        self.placement = placement
        # On a GPU: pinned, then an asynchronous copy (device.py).
        self.leaf = placement.tensor(np.require(pulled.rows, np.float32, ["C", "W"]))
        if requires_grad:
            self.leaf.requires_grad_(True)
        self._positions = {layer: placement.tensor(pos)
                           for layer, pos in pulled.positions.items()}
        self.counts = pulled.counts

    def positions_for(self, layer: SparseLayer, batch: Batch) -> torch.Tensor | None:
        """The positions planned for ``layer`` if these rows were pulled for ``batch``."""
        return self._positions.get(layer) if batch is self.batch else None

    def find(self, ids: np.ndarray) -> torch.Tensor | None:
        """Positions of ``ids`` in these rows, or None if any is missing (a subset lookup)."""
        flat = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        if self.ids.size == 0:
            return None if flat.size else torch.zeros(0, dtype=torch.int64)
        pos = np.searchsorted(self.ids, flat)
        np.minimum(pos, self.ids.size - 1, out=pos)
        if not np.array_equal(self.ids[pos], flat):
            return None
        return self.placement.tensor(pos.astype(np.int64, copy=False))

    def grad(self) -> tuple[np.ndarray, np.ndarray] | None:
        grad = self.leaf.grad
        return None if grad is None else (self.ids, self.placement.host(grad))


def _aligned(counts: tuple[np.ndarray, np.ndarray] | None,
             n: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts for the first ids of a gradient, padded with zeros to its ``n`` ids."""
    shows, clicks = counts if counts is not None else (np.zeros(0, np.float32),) * 2
    pad = np.zeros(n - shows.shape[0], np.float32)
    return np.concatenate([shows, pad]), np.concatenate([clicks, pad])


class SparseTables:
    """A model's sparse layers by table: shapes checked, pulls planned, gradients collected."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.layers: dict[str, list[SparseLayer]] = {}
        self.paths: dict[str, SparseLayer] = {}
        for path, module in model.named_modules():
            if isinstance(module, SparseLayer):
                self.paths[path] = module
                self.layers.setdefault(module.table_name, []).append(module)
        for table, layers in self.layers.items():
            first = layers[0]
            for layer in layers[1:]:
                if (layer.dim, layer.num_embeddings) != (first.dim, first.num_embeddings):
                    raise ConfigError(f"sparse table {table!r} is used with two different "
                                      f"shapes: dim/num_embeddings {first.dim}/"
                                      f"{first.num_embeddings} and {layer.dim}/"
                                      f"{layer.num_embeddings}")
                if layer.policy != first.policy:
                    raise ConfigError(f"sparse table {table!r} is used with two different "
                                      "admit/evict/max_rows settings; give them once, alike")
        self._installed: dict[str, TableRows] = {}
        self.placement: Placement = CPU  # where the rows go (the trainer sets it)
        # Tables that evict by show/click score, as declared (the trainer sets it), and whether
        # the labels are 0/1 clicks (the step runner sets it from the objective).
        self.counted: set[str] = set()
        self.clicks_from_label = False

    def __iter__(self) -> Iterator[str]:
        return iter(self.layers)

    def first(self, table: str) -> SparseLayer:
        """The layer whose table spec (optimizer, initializer) declares ``table``."""
        return self.layers[table][0]

    def bind(self, client: ParameterClient | None) -> None:
        for layers in self.layers.values():
            for layer in layers:
                layer.bind(client, self.placement)

    # -- one batch ---------------------------------------------------------------------------

    def plan(self, batch: Batch) -> dict[str, tuple[np.ndarray, dict[SparseLayer, np.ndarray]]]:
        """Per table whose layers read columns: its unique ids in ``batch`` and each layer's
        positions in them. Numpy only: safe on the prefetch thread."""
        return {table: (uniq, positions)
                for table, (uniq, positions, _) in self._plan(batch).items()}

    def _plan(self, batch: Batch) -> dict[str, tuple[np.ndarray, dict[SparseLayer, np.ndarray],
                                                     tuple[np.ndarray, np.ndarray] | None]]:
        """:meth:`plan`, and for counted tables the batch's show/click counts per id."""
        plans: dict[str, tuple[np.ndarray, dict[SparseLayer, np.ndarray],
                               tuple[np.ndarray, np.ndarray] | None]] = {}
        positive = positive_examples(batch) if self.clicks_from_label else None
        for table, layers in self.layers.items():
            parts = [(layer, ids) for layer in layers
                     if (ids := layer.ids_for(batch)) is not None]
            if not parts:
                continue
            flat = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts])
            uniq, inverse = layers[0].unique_ids(flat)
            bounds = np.cumsum([ids.size for _, ids in parts])[:-1]
            positions = dict(zip([layer for layer, _ in parts], np.split(inverse, bounds),
                                 strict=True))
            counts = None
            if table in self.counted:
                examples = np.concatenate([layer.examples_for(batch) for layer, _ in parts])
                counts = show_click_counts(inverse, examples, positive, uniq.shape[0])
            plans[table] = (uniq, positions, counts)
        return plans

    def pull(self, client: ParameterClient, batch: Batch) -> dict[str, PulledRows]:
        """The rows ``batch`` needs, one pull per table."""
        return {table: PulledRows(uniq, client.pull_sparse(table, uniq), positions, counts)
                for table, (uniq, positions, counts) in self._plan(batch).items()}

    def install(self, pulled: Mapping[str, PulledRows], batch: Batch | None,
                requires_grad: bool) -> None:
        """Hand each layer its table's rows for ``batch`` (None for tables not pulled)."""
        self._installed = {table: TableRows(rows, batch, requires_grad, self.placement)
                           for table, rows in pulled.items()}
        for table, layers in self.layers.items():
            rows = self._installed.get(table)
            for layer in layers:
                layer.install(rows)

    def clear(self) -> None:
        """Forget the installed rows (after the step: a later call must not see stale rows)."""
        self._installed = {}
        for layers in self.layers.values():
            for layer in layers:
                layer.install(None)

    def grads(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per table ``(ids, grad rows)`` of this batch; ids may repeat (the pserver sums)."""
        return self.grads_and_counts()[0]

    def grads_and_counts(self) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]],
                                        dict[str, tuple[np.ndarray, np.ndarray]]]:
        """:meth:`grads`, and for counted tables (shows, clicks) per id of the gradient: the
        installed rows' counts, zero for rows a layer pulled itself (a raw id call: no batch
        column shows them)."""
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        counts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for table, layers in self.layers.items():
            installed = self._installed.get(table)
            first = installed.grad() if installed is not None else None
            parts = [first] + [layer.take_grads() for layer in layers]
            found = [p for p in parts if p is not None]
            if len(found) == 1:
                out[table] = found[0]
            elif found:
                out[table] = (np.concatenate([p[0] for p in found]),
                              np.concatenate([p[1] for p in found]))
            if found and table in self.counted:
                counts[table] = _aligned(installed.counts if first is not None and
                                         installed is not None else None, out[table][0].shape[0])
        return out, counts

    def ids_in(self, batches: Iterable[Batch]) -> dict[str, np.ndarray]:
        """Every id the layers read in ``batches``, per table (sorted, unique): the rows an
        export of a model trained on them should hold."""
        seen: dict[str, list[np.ndarray]] = {}
        for batch in batches:
            for table, (uniq, _) in self.plan(batch).items():
                seen.setdefault(table, []).append(uniq)
        return {table: np.unique(np.concatenate(parts)) for table, parts in seen.items()}
