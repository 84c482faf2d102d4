"""``elasticps data inspect``: a dataset's summary from its manifest (no data scan needed):
rows, chunks, label rate, missing rates, and the declared schema (label kind, tables, every
column's kind and options, the dense statistics measured at conversion)."""

from __future__ import annotations

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
        for start in range(0, len(names), 7):
            lines.append(
                "  " + "  ".join(f"{n:>3} {rates[n]:6.1%}" for n in names[start : start + 7])
            )
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
    for name, column in schema["columns"].items():
        kind = f"{column['kind']} ({column['dtype']})" if column["dtype"] else column["kind"]
        if column["kind"] == "dense":
            detail = f"norm {column['norm']}"
            if column["missing_value"]:
                detail += f", missing -> {column['missing_value']:g}"
            stats = column.get("stats")
            if stats and stats.get("count"):
                detail += (f"; mean {stats['mean']:.4g}, std {stats['std']:.4g}, "
                           f"min {stats['min']:.4g}, max {stats['max']:.4g}")
            elif stats:
                detail += f"; range [{stats['min']:g}, {stats['max']:g}]"
        else:
            detail = f"-> {column['table']}, ids {column['ids']}"
            if column.get("sep"):
                detail += f", sep {column['sep']!r}"
        lines.append(f"  {name:<14}{kind:<30}{detail}")
    return lines
