"""``elasticps data inspect``: a dataset's summary from its manifest (no data scan needed)."""

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
    }


def format_summary(info: dict[str, Any]) -> str:
    lines = [
        f"dataset       {info['url']}",
        f"rows          {info['rows']:,}",
        f"chunks        {info['chunks']:,} in {info['files']} file(s), "
        f"up to {info['rows_per_chunk']:,} rows each",
        f"label rate    {info['label_rate']:.4f}",
    ]
    if info["best_auc"] is not None:
        lines.append(f"best AUC      {info['best_auc']:.4f}  (planted model's true probabilities)")
    if info["best_logloss"] is not None:
        lines.append(f"best logloss  {info['best_logloss']:.4f}")
    source = info["source"]
    if source.get("kind"):
        extra = ""
        if source["kind"] == "criteo":
            extra = (f", {source.get('bad_rows', 0)} malformed and "
                     f"{source.get('blank_lines', 0)} blank line(s) skipped")
        elif source["kind"] == "synthetic":
            extra = f", seed {source.get('seed')}"
        lines.append(f"source        {source['kind']}{extra}")
    if info["splits"]:
        lines.append("splits        " + ", ".join(f"{k} -> {v}" for k, v in info["splits"].items()))
    rates = info["missing_rates"]
    if rates:
        lines.append("missing rate per column:")
        names = [name for name in rates if name not in ("label", "p_true")]
        for start in range(0, len(names), 7):
            lines.append(
                "  " + "  ".join(f"{n:>3} {rates[n]:6.1%}" for n in names[start : start + 7])
            )
    return "\n".join(lines)
