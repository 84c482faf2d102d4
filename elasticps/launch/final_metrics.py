"""What ``elasticps run`` says of a finished job's result: the final test metric of its label
kind, and the passes it trained when the result does not say.

==============  =========================================================================
label kind      the final line (from ``summary.json``)
==============  =========================================================================
binary          ``final test auc X (best achievable Y)``; several labels: each one's after
multi_label     ``final test auc X``
float           ``final test rmse X``; several labels: each one's after
class           ``final test accuracy X``
==============  =========================================================================

Any other result (a multi-task model's heads, a model's own metrics) ends with ``final test
NAME X, NAME Y, ...`` over the metrics its ``headline`` names; a result with neither (a
script's own) is read by the first of ``auc``, ``rmse``, ``accuracy`` it holds as a number.
With more than one pass evaluated, a line ``test METRIC by pass: ...`` comes first. Pure: the
launcher prints what these functions return.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elasticps.store.keys import TrainerProgress

HEADLINE = {"binary": "auc", "multi_label": "auc", "float": "rmse", "class": "accuracy"}
_PER_LABEL_SHOWN = 16


def headline_metric(summary: Mapping[str, Any]) -> str | None:
    """The name of the metric that the final line reports, or None if the summary has none."""
    metric = HEADLINE.get(str(summary.get("label_kind")))
    if metric is not None:
        return metric
    return next((name for name in ("auc", "rmse", "accuracy")
                 if _number(summary.get(name))), None)


def headline_figures(summary: Mapping[str, Any]) -> str:
    """The result's ``headline`` test metrics as ``name value, ...``, or "" when it names none."""
    names = summary.get("headline")
    if not isinstance(names, list):
        return ""
    return ", ".join(f"{name} {summary[name]:.4f}" for name in names
                     if isinstance(name, str) and _number(summary.get(name)))


def final_lines(summary: Mapping[str, Any]) -> list[str]:
    """The lines printed on stdout after a successful job (see the module docstring)."""
    if str(summary.get("label_kind")) not in HEADLINE and headline_figures(summary):
        return [f"final test {headline_figures(summary)}"]
    metric = headline_metric(summary)
    value = summary.get(metric) if metric is not None else None
    if metric is None or not _number(value):
        return []
    lines = []
    by_pass = [v for v in summary.get(f"pass_test_{metric}") or [] if _number(v)]
    if len(by_pass) > 1:
        lines.append(f"test {metric} by pass: " + ", ".join(f"{v:.4f}" for v in by_pass))
    line = f"final test {metric} {value:.4f}"
    best = summary.get("best_auc")
    if metric == "auc" and _number(best):
        line += f" (best achievable {best:.4f})"
    per_label = [(key.removeprefix(f"{metric}_"), v) for key, v in summary.items()
                 if key.startswith(f"{metric}_") and _number(v)]
    if per_label:
        line += "; " + ", ".join(f"{name} {v:.4f}" for name, v in
                                 sorted(per_label)[:_PER_LABEL_SHOWN])
    return [*lines, line]


def passes_trained(progress: Mapping[str, TrainerProgress]) -> int | None:
    """How many passes the trainers finished (the highest pass with metrics, plus one), for a
    result that does not say; None when no trainer reported a pass."""
    passes = [int(key) for record in progress.values() for key in record.pass_metrics
              if key.isdigit()]
    return max(passes) + 1 if passes else None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
