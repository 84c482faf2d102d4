"""The declared schema of a dataset: the user's contract for what each column is.

A schema file (YAML) names the label(s), an optional weight column, and every feature column
with its kind::

    label: clicked                       # or a list of names, or {name, kind, classes, sep}
    weight: w                            # optional per-row loss weight
    missing: ["", "NA", "?"]             # tokens read as missing (the default)
    defaults: {table: features, dim: 8, id_space: 1000003}
    tables:                              # optional: tables not described by a column
      users: {dim: 16, id_space: 100003}
    columns:
      age: dense                         # normalisation defaults to standard
      income: {kind: dense, norm: log}
      country: categorical               # hashed into the default table
      genres: {kind: multi_categorical, sep: "|"}
      user_id: {kind: categorical, table: users, dim: 16}
      item: {kind: categorical, ids: passthrough, table: items, id_space: 5000}

Column kinds:

- ``dense``: a number (``dtype`` int, int32 or float); ``norm`` is ``standard`` (the default:
  minus the mean, over the standard deviation, both computed at conversion), ``minmax`` (to [0, 1]
  by the minimum and maximum seen at conversion), ``log`` (``log(1 + max(x, 0))``) or ``none``; a
  missing value becomes ``missing_value`` (default 0.0) after normalisation. Statistics the schema
  declares (``stats``) are kept, not measured: a preset's fixed range, another dataset's.
- ``categorical``: an int or a string, one per row, mapped into its table's id space by the
  stable hash (``ids: hash``, the default) or taken as it is (``ids: passthrough``: ids already in
  ``[0, id_space)``; a value outside is a data error naming the column).

Dtypes (the source type; undeclared, conversion decides it from the first rows): ``int`` (an
integer, stored as int64), ``int32`` (an integer in [-2**31, 2**31), stored as int32), ``float``
(dense only), ``string`` (categorical kinds only) and ``hex32`` (categorical kinds only: a 32-bit
value written as exactly 8 hexadecimal digits, either case, such as Criteo's ``05db9164``; stored
as uint32 and hashed as the integer it spells).
- ``multi_categorical``: a variable-length list per row (a string split on ``sep``, or a Parquet
  list column), each value mapped as for ``categorical``.
- ``text``: free text, stored as it is; at read time :mod:`~elasticps.data.tokenize` lower-cases
  it and splits it into words, and the words are hashed into the column's table like the values
  of a ``multi_categorical`` column (a bag per row).
- ``dense_vector``: ``length`` numbers per row (a Parquet/JSON list, or text such as
  ``[0.1, 0.2]``), e.g. a pretrained embedding; stored as float32 and read as one float32
  ``[B, length]`` array per column (``Batch.vectors``), not normalised. A row of another length
  is malformed.
- ``ignore``: a column the input has and the dataset leaves out (read past, never stored).

Each categorical column feeds one sparse table (columns may share one: each column hashes with
its own salt, so equal values in two columns get unrelated ids); each table has its own ``dim``
and ``id_space``. Label kinds: ``binary`` (0/1, the default), ``float`` (regression),
``multi_label`` (a set of class indices per row, ``classes`` of them, split on ``sep``) and
``class`` (one class index in ``[0, classes)``, e.g. the next word of a language model).
Several label columns may mix ``binary``, ``float`` and ``class`` (a multi-task model, one head
per label); a ``multi_label`` label stands alone.

:meth:`Schema.from_dict` / :meth:`Schema.from_yaml` read the user's form; :meth:`Schema.to_dict`
writes the normalised form (every option explicit, statistics included) that a dataset manifest
stores and :meth:`Schema.from_dict` reads back. Every error is a
:class:`~elasticps.errors.ConfigError` naming the column and the bad value.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from elasticps.errors import ConfigError, shown

FEATURE_KINDS = ("dense", "categorical", "multi_categorical", "text", "dense_vector")
CATEGORICAL_KINDS = ("categorical", "multi_categorical", "text")  # kinds that feed a table
IGNORE = "ignore"  # the kind of a column the input has and the dataset leaves out
TOKENIZERS = ("words",)  # text: see elasticps.data.tokenize
MAX_VECTOR_LENGTH = 1 << 16
LABEL_KINDS = ("binary", "float", "multi_label", "class")
MIXED = "mixed"  # several labels of different kinds (binary, float, class)
NORMS = ("standard", "minmax", "log", "none")
ID_MODES = ("hash", "passthrough")
DTYPES = ("int", "int32", "float", "string", "hex32")
INTEGER_DTYPES = ("int", "int32")
DEFAULT_MISSING = ("", "NA", "?")
DEFAULT_TABLE = "features"
DEFAULT_DIM = 8
DEFAULT_ID_SPACE = 1_000_003
MAX_ID_SPACE = 2**63 - 1
SALT_LIMIT = 1 << 31


def default_salt(column: str) -> int:
    """The hash salt of a categorical column that declares none: ``crc32(UTF-8 name)`` in 31
    bits (see :mod:`elasticps.data.hashing`)."""
    return zlib.crc32(column.encode("utf-8")) & (SALT_LIMIT - 1)


@dataclass(frozen=True)
class TableDecl:
    """One sparse table: rows of width ``dim``, ids in ``[0, id_space)``."""

    name: str
    dim: int = DEFAULT_DIM
    id_space: int = DEFAULT_ID_SPACE

    def __post_init__(self) -> None:
        _check_name(self.name, "table")
        _check_int(self.dim, f"table {shown(self.name)}: dim", 1, 1 << 16)
        _check_int(self.id_space, f"table {shown(self.name)}: id_space", 1, MAX_ID_SPACE)


@dataclass(frozen=True)
class DenseStats:
    """What conversion measured of a dense column (present values only)."""

    count: int = 0
    mean: float = 0.0
    std: float = 0.0
    min: float = 0.0
    max: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> DenseStats:
        doc = _mapping(raw, where)
        _only(doc, {"count", "mean", "std", "min", "max"}, where)
        values = {k: _number(doc.get(k, 0.0), f"{where}: {k}") for k in ("mean", "std", "min",
                                                                          "max")}
        return cls(count=_check_int(doc.get("count", 0), f"{where}: count", 0, None), **values)


@dataclass(frozen=True)
class LabelSpec:
    """One label column and what its values mean.

    A ``class`` label is read **by value** unless it declares a count: ``classes: [v, ...]``
    (``values``) lists its classes, index k = the k-th; with neither, the classes are the values
    seen at conversion, sorted (:mod:`elasticps.data.label_values`), and the manifest records
    them. ``classes: N`` alone means values that already are class indices in ``[0, N)``."""

    name: str
    kind: str = "binary"
    classes: int | None = None  # multi_label and class: how many classes
    sep: str | None = None  # multi_label from text: the separator of the class list
    values: tuple[int | str, ...] | None = None  # class by value: the classes, in index order

    def __post_init__(self) -> None:
        _check_name(self.name, "label column")
        where = f"label {shown(self.name)}"
        _check_choice(self.kind, LABEL_KINDS, f"{where}: kind")
        if self.values is not None:
            if self.kind != "class":
                raise ConfigError(f"{where}: class values apply to class labels only")
            _check_values(self.values, where)
            if self.classes is not None and self.classes != len(self.values):
                raise ConfigError(f"{where}: classes is {self.classes} but {len(self.values)} "
                                  "values are listed")
            object.__setattr__(self, "classes", len(self.values))
        if self.kind == "multi_label" or (self.kind == "class" and self.classes is not None):
            if self.classes is None:
                raise ConfigError(f"{where}: kind {self.kind} needs 'classes' (how many)")
            _check_int(self.classes, f"{where}: classes", 2, 1 << 24)
        elif self.classes is not None:
            raise ConfigError(f"{where}: 'classes' applies to multi_label and class labels only")
        if self.sep is not None and self.kind != "multi_label":
            raise ConfigError(f"{where}: 'sep' applies to multi_label labels only")

    @property
    def by_value(self) -> bool:
        """A class label stored as its values (mapped to indices at read time), not as
        indices."""
        return self.kind == "class" and (self.values is not None or self.classes is None)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "classes": self.classes, "sep": self.sep,
                "values": None if self.values is None else list(self.values)}


@dataclass(frozen=True)
class ColumnSpec:
    """One feature column. Options that do not apply to its kind stay at their defaults."""

    name: str
    kind: str
    dtype: str | None = None  # the source type; None until conversion decides it
    norm: str = "standard"  # dense
    missing_value: float = 0.0  # dense: the value of a missing entry after normalisation
    stats: DenseStats | None = None  # dense: measured at conversion (or fixed by a preset)
    table: str = DEFAULT_TABLE  # categorical kinds
    ids: str = "hash"  # categorical kinds
    sep: str | None = None  # multi_categorical from text
    salt: int | None = None  # categorical kinds: hash salt (default: derived from the name)
    missing: tuple[str, ...] | None = None  # tokens read as missing (None: the schema's)
    length: int | None = None  # dense_vector: values per row
    tokenizer: str = "words"  # text

    def __post_init__(self) -> None:
        _check_name(self.name, "column")
        where = f"column {shown(self.name)}"
        _check_choice(self.kind, FEATURE_KINDS, f"{where}: kind")
        fixed = {"text": "string", "dense_vector": "float"}.get(self.kind)
        if fixed is not None:  # one source type: decided now, not by conversion
            if self.dtype not in (None, fixed):
                raise ConfigError(f"{where}: a {self.kind} column has dtype {fixed}, not "
                                  f"{self.dtype}")
            object.__setattr__(self, "dtype", fixed)
        if self.kind == "dense_vector":
            if self.length is None:
                raise ConfigError(f"{where}: kind dense_vector needs 'length' (the number of "
                                  "values in each row)")
            _check_int(self.length, f"{where}: length", 1, MAX_VECTOR_LENGTH)
        elif self.length is not None:
            raise ConfigError(f"{where}: 'length' applies to dense_vector columns only")
        if self.kind == "text":
            _check_choice(self.tokenizer, TOKENIZERS, f"{where}: tokenizer")
            if self.ids != "hash":
                raise ConfigError(f"{where}: the words of a text column are hashed (ids: hash)")
        self._check_kind_options(where)

    def _check_kind_options(self, where: str) -> None:
        if self.dtype is not None:
            _check_choice(self.dtype, DTYPES, f"{where}: dtype")
        if self.kind == "dense_vector":
            return
        if self.kind == "dense":
            _check_choice(self.norm, NORMS, f"{where}: norm")
            _number(self.missing_value, f"{where}: missing_value")
            if self.dtype not in (None, "float", *INTEGER_DTYPES):
                raise ConfigError(f"{where}: a dense column holds numbers (dtype float, int or "
                                  f"int32), not dtype {self.dtype}")
        else:
            _check_name(self.table, f"{where}: table")
            _check_choice(self.ids, ID_MODES, f"{where}: ids")
            if self.ids == "passthrough" and self.dtype not in (None, *INTEGER_DTYPES):
                raise ConfigError(f"{where}: ids: passthrough needs integer ids, not dtype "
                                  f"{self.dtype}")
            if self.salt is not None:
                _check_int(self.salt, f"{where}: salt", 0, (1 << 31) - 1)
        if self.kind == "multi_categorical":
            if self.sep is not None and not self.sep:
                raise ConfigError(f"{where}: sep must be a non-empty string")
        elif self.sep is not None:
            raise ConfigError(f"{where}: 'sep' applies to multi_categorical columns only")

    @property
    def is_categorical(self) -> bool:
        """Whether the column feeds a sparse table (categorical, multi_categorical, text)."""
        return self.kind in CATEGORICAL_KINDS

    @property
    def hash_salt(self) -> int:
        """The salt the hash uses: the declared one, else derived from the name."""
        return default_salt(self.name) if self.salt is None else self.salt

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "dtype": self.dtype}
        if self.kind == "dense":
            doc.update(norm=self.norm, missing_value=self.missing_value,
                       stats=None if self.stats is None else self.stats.to_dict())
        elif self.kind == "dense_vector":
            doc["length"] = self.length
        else:
            doc.update(table=self.table, ids=self.ids, salt=self.salt)
            if self.kind == "multi_categorical":
                doc["sep"] = self.sep
            if self.kind == "text":
                doc["tokenizer"] = self.tokenizer
        if self.missing is not None:
            doc["missing"] = list(self.missing)
        return doc


@dataclass(frozen=True)
class Schema:
    """Labels, an optional weight column, feature columns and the sparse tables they feed."""

    labels: tuple[LabelSpec, ...]
    columns: tuple[ColumnSpec, ...]
    tables: Mapping[str, TableDecl] = field(default_factory=dict)
    weight: str | None = None
    missing: tuple[str, ...] = DEFAULT_MISSING
    ignored: tuple[str, ...] = ()  # input columns the dataset leaves out (kind: ignore)

    def __post_init__(self) -> None:
        if not self.labels:
            raise ConfigError("a schema needs a label column ('label: NAME')")
        kinds = {label.kind for label in self.labels}
        if len(self.labels) > 1 and "multi_label" in kinds:
            raise ConfigError("a multi_label label is a set of classes of its own: it cannot "
                              "be one of several label columns")
        names = [label.name for label in self.labels] + [c.name for c in self.columns]
        if self.weight is not None:
            _check_name(self.weight, "weight column")
            names.append(self.weight)
        for name in self.ignored:
            _check_name(name, "ignored column")
        names += self.ignored
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ConfigError(f"column {shown(name)} appears twice in the schema")
            seen.add(name)
        for column in self.categorical_columns:
            if column.table not in self.tables:
                raise ConfigError(f"column {shown(column.name)} feeds table "
                                  f"{shown(column.table)}, which "
                                  f"the schema does not declare (tables: {sorted(self.tables)})")
        for name, table in self.tables.items():
            if table.name != name:
                raise ConfigError(f"table {shown(name)} is declared under the name "
                                  f"{shown(table.name)}")
            self._check_salts(name)

    def _check_salts(self, table: str) -> None:
        """Columns of one table must hash with distinct salts, or equal values in two of them
        would get the same id."""
        salted: dict[int, str] = {}
        for column in self.columns_of(table):
            if column.ids != "hash":
                continue
            other = salted.setdefault(column.hash_salt, column.name)
            if other != column.name:
                raise ConfigError(
                    f"columns {shown(other)} and {shown(column.name)} of table {shown(table)} "
                    "hash with the "
                    f"same salt {column.hash_salt}; give one of them another 'salt'")

    # -- views ------------------------------------------------------------------------------

    @property
    def label_kind(self) -> str:
        """The labels' kind; ``mixed`` for several labels of different kinds (a multi-task
        model's heads, one per label: trainer/heads.py)."""
        kinds = {label.kind for label in self.labels}
        return self.labels[0].kind if len(kinds) == 1 else MIXED

    @property
    def num_classes(self) -> int | None:
        return self.labels[0].classes

    @property
    def label_width(self) -> int:
        """Entries of ``Batch.label`` per row: 1 for one binary/float/class label, the number
        of labels for several, the number of classes for a multi-label set."""
        if self.label_kind == "multi_label":
            return int(self.labels[0].classes or 0)
        return len(self.labels)

    @property
    def dense_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(c for c in self.columns if c.kind == "dense")

    @property
    def categorical_columns(self) -> tuple[ColumnSpec, ...]:
        """Every column that feeds a table (categorical, multi_categorical, text), in schema
        order."""
        return tuple(c for c in self.columns if c.is_categorical)

    @property
    def vector_columns(self) -> tuple[ColumnSpec, ...]:
        """The dense_vector columns, in schema order."""
        return tuple(c for c in self.columns if c.kind == "dense_vector")

    def column(self, name: str) -> ColumnSpec:
        for column in self.columns:
            if column.name == name:
                return column
        raise ConfigError(f"the schema has no feature column {shown(name)}; it has "
                          f"{[c.name for c in self.columns]}")

    def columns_of(self, table: str) -> tuple[ColumnSpec, ...]:
        return tuple(c for c in self.categorical_columns if c.table == table)

    def missing_tokens(self, column: ColumnSpec) -> tuple[str, ...]:
        return self.missing if column.missing is None else column.missing

    def source_columns(self) -> tuple[str, ...]:
        """Every column a source must provide: labels, weight, features."""
        names = [label.name for label in self.labels]
        if self.weight is not None:
            names.append(self.weight)
        return (*names, *(c.name for c in self.columns))

    def replace_column(self, column: ColumnSpec) -> Schema:
        """This schema with ``column`` (same name) replaced: conversion fills dtype and stats."""
        self.column(column.name)
        columns = tuple(column if c.name == column.name else c for c in self.columns)
        return dataclasses.replace(self, columns=columns)

    # -- the normalised form ----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "labels": [label.to_dict() for label in self.labels],
            "weight": self.weight,
            "missing": list(self.missing),
            "tables": {name: {"dim": t.dim, "id_space": t.id_space}
                       for name, t in self.tables.items()},
            "columns": {**{c.name: c.to_dict() for c in self.columns},
                        **{name: {"kind": IGNORE} for name in self.ignored}},
        }

    @classmethod
    def from_yaml(cls, text: str | bytes, where: str = "schema") -> Schema:
        """Read a schema file's text (bytes: UTF-8), with the bounds of
        :mod:`elasticps.user_yaml`."""
        from elasticps.user_yaml import load_user_yaml  # PyYAML: not for `elasticps --help`

        return cls.from_dict(load_user_yaml(text, where), where)

    @classmethod
    def from_dict(cls, raw: Any, where: str = "schema") -> Schema:
        """Read a schema in the user's form (see the module docstring) or the normalised form
        :meth:`to_dict` writes."""
        doc = _mapping(raw, where)
        _only(doc, {"label", "labels", "weight", "missing", "defaults", "tables", "columns"},
              where)
        defaults = _mapping(doc.get("defaults") or {}, f"{where}: defaults")
        _only(defaults, {"table", "dim", "id_space", "norm", "ids"}, f"{where}: defaults")
        missing = _tokens(doc.get("missing", list(DEFAULT_MISSING)), f"{where}: missing")
        labels = _labels(doc.get("labels", doc.get("label")), where)
        weight = doc.get("weight")
        if weight is not None and not isinstance(weight, str):
            raise ConfigError(f"{where}: weight must be a column name, got {shown(weight)}")
        raw_columns = _mapping(doc.get("columns") or {}, f"{where}: columns")
        columns: list[ColumnSpec] = []
        ignored: list[str] = []
        tables: dict[str, TableDecl] = {}
        for name, table_raw in _mapping(doc.get("tables") or {}, f"{where}: tables").items():
            spec = _mapping(table_raw or {}, f"{where}: table {shown(name)}")
            _only(spec, {"dim", "id_space"}, f"{where}: table {shown(name)}")
            tables[str(name)] = TableDecl(str(name), spec.get("dim", defaults.get(
                "dim", DEFAULT_DIM)), spec.get("id_space", defaults.get("id_space",
                                                                        DEFAULT_ID_SPACE)))
        for name, column_raw in raw_columns.items():
            if _ignored(str(name), column_raw, where):
                ignored.append(str(name))
                continue
            column, shape = _column(str(name), column_raw, defaults, where)
            columns.append(column)
            if column.is_categorical:
                _declare(tables, column.table, shape, defaults, f"{where}: column {shown(name)}")
        return cls(labels=labels, columns=tuple(columns), tables=tables, weight=weight,
                   missing=missing, ignored=tuple(ignored))


# -- parsing helpers -------------------------------------------------------------------------

_COLUMN_KEYS = {"kind", "dtype", "norm", "missing_value", "stats", "table", "dim", "id_space",
                "ids", "sep", "salt", "missing", "length", "tokenizer"}
_KIND_KEYS = {  # the keys each kind takes besides kind, dtype and missing
    "dense": {"norm", "missing_value", "stats"},
    "dense_vector": {"length", "norm"},  # norm: none only (vectors are not normalised)
    "categorical": {"table", "dim", "id_space", "ids", "salt"},
    "multi_categorical": {"table", "dim", "id_space", "ids", "salt", "sep"},
    "text": {"table", "dim", "id_space", "ids", "salt", "tokenizer"},
}


def _owners(key: str) -> str:
    """The kinds that take ``key``, for an error message."""
    kinds = [kind for kind, keys in _KIND_KEYS.items() if key in keys]
    if set(kinds) == set(CATEGORICAL_KINDS):
        return "categorical"
    return " and ".join(kinds)


def _ignored(name: str, raw: Any, where: str) -> bool:
    """Whether the column is declared ``ignore`` (``name: ignore`` or ``{kind: ignore}``)."""
    if raw == IGNORE:
        return True
    if isinstance(raw, Mapping) and raw.get("kind") == IGNORE:
        _only(raw, {"kind"}, f"{where}: column {shown(name)} (ignore)")
        return True
    return False


def _column(name: str, raw: Any, defaults: Mapping[str, Any],
            where: str) -> tuple[ColumnSpec, dict[str, Any]]:
    """The column, and the table shape (dim, id_space) it states, if any."""
    here = f"{where}: column {shown(name)}"
    doc = {"kind": raw} if isinstance(raw, str) else dict(_mapping(raw, here))
    _only(doc, _COLUMN_KEYS, here)
    kind = doc.get("kind")
    if not isinstance(kind, str):
        raise ConfigError(f"{here}: kind must be one of {', '.join(FEATURE_KINDS)} or "
                          f"{IGNORE}, got {shown(kind)}")
    if kind == "dense_vector" and doc.get("norm", "none") != "none":
        raise ConfigError(f"{here}: dense_vector values reach the model as stored (norm: none), "
                          f"not norm {shown(doc['norm'])}")
    stats = doc.get("stats")
    missing = doc.get("missing")
    column = ColumnSpec(
        name=name, kind=kind, dtype=doc.get("dtype"),
        norm=doc.get("norm", defaults.get("norm", "standard")),
        missing_value=_number(doc.get("missing_value", 0.0), f"{here}: missing_value"),
        stats=None if stats is None else DenseStats.from_dict(stats, f"{here}: stats"),
        table=doc.get("table", defaults.get("table", DEFAULT_TABLE)),
        # A text column's words are always hashed: the defaults' ids do not apply to it.
        ids=doc.get("ids", "hash" if kind == "text" else defaults.get("ids", "hash")),
        sep=doc.get("sep"),
        salt=_optional_int(doc.get("salt"), f"{here}: salt"),
        missing=None if missing is None else _tokens(missing, f"{here}: missing"),
        length=_optional_int(doc.get("length"), f"{here}: length"),
        tokenizer=doc.get("tokenizer", "words"))
    for key in sorted(set(doc) - {"kind", "dtype", "missing"} - _KIND_KEYS[kind]):
        if doc[key] is not None:  # the normalised form writes options of other kinds as null
            raise ConfigError(f"{here}: {shown(key)} applies to {_owners(key)} columns only, not "
                              f"to a {kind} column")
    return column, {k: doc[k] for k in ("dim", "id_space") if k in doc}


def _declare(tables: dict[str, TableDecl], name: str, shape: Mapping[str, Any],
             defaults: Mapping[str, Any], where: str) -> None:
    """Declare table ``name`` as a column states it: a shape the column does not state is the
    table's known one, else the defaults'; a stated shape must agree with the known one."""
    known = tables.get(name)
    if known is None:
        tables[name] = TableDecl(name, shape.get("dim", defaults.get("dim", DEFAULT_DIM)),
                                 shape.get("id_space", defaults.get("id_space",
                                                                    DEFAULT_ID_SPACE)))
        return
    table = TableDecl(name, shape.get("dim", known.dim), shape.get("id_space", known.id_space))
    if known != table:
        raise ConfigError(f"{where}: table {shown(table.name)} is declared with dim={table.dim}, "
                          f"id_space={table.id_space} here but dim={known.dim}, "
                          f"id_space={known.id_space} elsewhere; a table has one shape")


def _labels(raw: Any, where: str) -> tuple[LabelSpec, ...]:
    if raw is None:
        raise ConfigError(f"{where} needs a label column ('label: NAME')")
    items = raw if isinstance(raw, list) else [raw]
    labels = []
    for item in items:
        if isinstance(item, str):
            labels.append(LabelSpec(item))
            continue
        doc = _mapping(item, f"{where}: label")
        _only(doc, {"name", "kind", "classes", "sep", "values"}, f"{where}: label")
        classes, values = doc.get("classes"), doc.get("values")
        if isinstance(classes, list):  # classes: [v, ...] lists the values
            classes, values = None, classes if values is None else values
        if values is not None and not isinstance(values, list):
            raise ConfigError(f"{where}: label values must be a list, got {shown(values)}")
        labels.append(LabelSpec(doc.get("name", ""), doc.get("kind", "binary"), classes,
                                doc.get("sep"), None if values is None else tuple(values)))
    return tuple(labels)


def _check_values(values: tuple[Any, ...], where: str) -> None:
    """Class values: integers or strings (YAML reads unquoted yes/no as booleans), as many as
    a class label may have, each once."""
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ConfigError(f"{where}: class value {shown(value)} is not an integer or a string "
                              "(quote words such as 'yes' and 'no' in YAML)")
    keys = [str(value) for value in values]
    if len(set(keys)) != len(keys):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        raise ConfigError(f"{where}: class value(s) {twice} are listed twice")
    if len(values) < 2:
        raise ConfigError(f"{where}: a class label needs at least 2 classes, got "
                          f"{list(values)}")


def _optional_int(value: Any, where: str) -> int | None:
    return None if value is None else _check_int(value, where, 0, None)


def _mapping(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {shown(raw)}")
    return raw


def _only(doc: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def _tokens(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise ConfigError(f"{where} must be a list of strings, got {shown(raw)}")
    return tuple(raw)


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        raise ConfigError(f"{what} name {shown(name)} must be a non-empty string without '/' or "
                          "surrounding spaces")


def _check_choice(value: Any, choices: Iterable[str], where: str) -> None:
    options = tuple(choices)
    if value not in options:
        raise ConfigError(f"{where} is {shown(value)}; choose one of {', '.join(options)}")


def _check_int(value: Any, where: str, low: int, high: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ConfigError(f"{where} must be an integer {bound}, got {shown(value)}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {shown(value)}")
    return float(value)
