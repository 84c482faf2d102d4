"""``elasticps data inspect``: a dataset's summary from its manifest (no data scan needed):
rows, chunks, label rate, missing rates, and the declared schema (label kind, tables, every
column's kind and options, the dense statistics measured at conversion)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from elasticps.data.dataset import Dataset


def summary(dataset: Dataset) -> dict[str, Any]:
    """Rows, chunks, label rate, per-column missing rates and the planted best AUC."""
    m = dataset.manifest
    files = sorted({chunk.path for chunk in m.chunks})
    return {
        "url": dataset.url,
        "rows": m.num_rows,
        "chunks": len(m.chunks),
        "files": len(files),
        "rows_per_chunk": max((chunk.num_rows for chunk in m.chunks), default=0),
        "label_rate": m.label_rate,
        "missing_rates": {
            name: (count / m.num_rows if m.num_rows else 0.0)
            for name, count in m.null_counts.items()
        },
        "best_auc": m.best_auc,
        "best_logloss": m.best_logloss,
        "splits": dict(m.splits),
        "source": m.source,
        "format": f"{m.format} (version {m.format_version})",
        "other_files": dict(m.files),
        "schema": m.schema.to_dict(),
    }


def format_summary(info: dict[str, Any]) -> str:
    lines = [
        f"dataset       {info['url']}",
        f"format        {info['format']}",
        f"rows          {info['rows']:,}",
        f"chunks        {info['chunks']:,} in {info['files']} file(s), "
        f"up to {info['rows_per_chunk']:,} rows each",
    ]
    if info["schema"]["labels"][0]["kind"] == "binary":
        lines.append(f"label rate    {info['label_rate']:.4f}")
    if info["best_auc"] is not None:
        lines.append(f"best AUC      {info['best_auc']:.4f}  (planted model's true probabilities)")
    if info["best_logloss"] is not None:
        lines.append(f"best logloss  {info['best_logloss']:.4f}")
    source = info["source"]
    if source.get("kind"):
        extra = ""
        if "bad_rows" in source:
            extra = (f", {source.get('bad_rows', 0)} malformed and "
                     f"{source.get('blank_lines', 0)} blank line(s) skipped")
        elif source["kind"] == "synthetic":
            extra = f", seed {source.get('seed')}"
        lines.append(f"source        {source['kind']}{extra}")
    if info["splits"]:
        lines.append("splits        " + ", ".join(f"{k} -> {v}" for k, v in info["splits"].items()))
    if info["other_files"]:
        lines.append("other files   " + ", ".join(f"{k}: {v}" for k, v in
                                                  info["other_files"].items()))
    lines += _schema_lines(info["schema"])
    rates = info["missing_rates"]
    if rates:
        lines.append("missing rate per column:")
        labels = {label["name"] for label in info["schema"]["labels"]}
        names = [name for name in rates if name not in labels and name != "p_true"]
        width = _width(names, at_least=3)
        lines += _grid([f"{name:>{width}} {rates[name]:6.1%}" for name in names])
    return "\n".join(lines)


def _schema_lines(schema: dict[str, Any]) -> list[str]:
    """The declared schema, one line per label, table and column."""
    lines = []
    for label in schema["labels"]:
        extra = f", {label['classes']} classes" if label["classes"] else ""
        values = label.get("values")
        if values:
            extra += ": " + ", ".join(str(v) for v in values[:10]) + (
                ", ..." if len(values) > 10 else "")
        lines.append(f"label         {label['name']}: {label['kind']}{extra}")
    if schema["weight"]:
        lines.append(f"weight        {schema['weight']}")
    for name, table in schema["tables"].items():
        lines.append(f"table         {name}: dim {table['dim']}, id_space {table['id_space']:,}")
    if schema["columns"]:
        lines.append("columns:")
    kinds = {name: f"{column['kind']} ({column['dtype']})" if column.get("dtype")
             else column["kind"] for name, column in schema["columns"].items()}
    name_width, kind_width = _width(kinds) + 2, _width(kinds.values()) + 2
    for name, column in schema["columns"].items():
        detail = _detail(column)
        lines.append(f"  {name:<{name_width}}{kinds[name]:<{kind_width}}{detail}".rstrip())
    return lines


def _width(texts: Iterable[str], at_least: int = 12) -> int:
    """The width of the widest of ``texts``, and at least ``at_least``."""
    return max([at_least, *(len(text) for text in texts)])


def _grid(cells: list[str], width: int = 100) -> list[str]:
    """Equal-width ``cells`` as lines of as many as fit in ``width`` characters."""
    if not cells:
        return []
    per_line = max(1, (width - 2) // (max(len(cell) for cell in cells) + 2))
    return ["  " + "  ".join(cells[start:start + per_line])
            for start in range(0, len(cells), per_line)]


def _detail(column: dict[str, Any]) -> str:
    """A column's options after its kind: norm and statistics, table, length."""
    kind = column["kind"]
    if kind == "ignore":
        return "left out (not stored)"
    if kind == "dense_vector":
        return f"length {column['length']}, not normalised"
    if kind == "dense":
        detail = f"norm {column['norm']}"
        if column["missing_value"]:
            detail += f", missing -> {column['missing_value']:g}"
        stats = column.get("stats")
        if stats and stats.get("count"):
            detail += (f"; mean {stats['mean']:.4g}, std {stats['std']:.4g}, "
                       f"min {stats['min']:.4g}, max {stats['max']:.4g}")
        elif stats:
            detail += f"; range [{stats['min']:g}, {stats['max']:g}]"
        return detail
    detail = f"-> {column['table']}, ids {column['ids']}"
    if column.get("sep"):
        detail += f", sep {column['sep']!r}"
    if column.get("tokenizer"):
        detail += f", tokenizer {column['tokenizer']}"
    return detail
