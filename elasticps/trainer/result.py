"""The job's automatic result: the last pass's metrics, for ``summary.json``.

When ``Trainer.train`` ends, the trainer offers this document as the job's result with a
compare-and-set on a missing key (:func:`elasticps.store.keys.publish_result_if_absent`): the
first trainer to finish writes it (unless it trained nothing in the last pass and another did:
that one's replaces it), and a script's own ``elasticps.publish_result(doc)`` (written before or
after) always wins. Any trainer will do for the test metrics: the last pass ends only when every
task of the job is trained and applied, so every trainer evaluates the same final parameters.

The document holds the test set's metrics under their plain names (``auc``, ``logloss`` for
binary labels; ``rmse``, ``mae``; ``accuracy``, ``cross_entropy``, ``perplexity``...), each one's
value per pass as ``pass_test_<name>``, and the last pass's training metrics as ``train_<name>``
(never under the plain names, which the launcher reports as test figures). ``headline`` lists
the test metrics the launcher's final line shows (``auc``; ``rmse``; ``accuracy`` and
``perplexity``; each head's for a multi-task model; all of a model's own metrics).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

NOT_METRICS = ("samples", "eval_s")


def _finite(value: Any) -> Any:
    """JSON has no NaN: a metric that could not be computed (one class only) becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def default_result(pass_metrics: Sequence[Mapping[str, float]], *, passes: int,
                   label_kind: str, trainer: str,
                   headline: Sequence[str] = ()) -> dict[str, Any]:
    """The result document of a trainer's ``EndPass`` metrics (see the module docstring);
    ``headline``: the metrics the launcher's final line shows, of those the test set has."""
    doc: dict[str, Any] = {"passes": passes, "label_kind": label_kind, "result_by": trainer}
    if not pass_metrics:
        return doc
    last = pass_metrics[-1]
    test = {k.removeprefix("test_"): v for k, v in last.items() if k.startswith("test_")}
    shown = [name for name in headline if name in test]
    if shown:
        doc["headline"] = shown
    for name, value in test.items():
        if name in NOT_METRICS:
            doc[f"test_{name}"] = _finite(value)
            continue
        doc[name] = _finite(value)
        doc[f"pass_test_{name}"] = [_finite(m.get(f"test_{name}")) for m in pass_metrics]
    for name, value in last.items():
        if not name.startswith("test_"):
            doc[f"train_{name}"] = _finite(value)
    return doc
