"""One loaded version of a model: raw rows in, scores out.

Rows become a batch by the dataset's own rules (:func:`elasticps.data.score_rows.rows_batch`,
with the schema the export records), the model built by the user's code computes its outputs,
and the label kind the export records turns outputs into scores:

=============== ======================================================================
binary          the probability of the positive class (a list, one per label, with several)
multi_label     a list of probabilities, one per class
float           the predicted value (a list with several labels)
class           a list of probabilities in class order; the answer's ``classes`` names them
=============== ======================================================================

The probabilities are computed as ``examples/tabular/score.py`` computes them (in float64 from
the model's float32 outputs), so a served score is the plain-PyTorch scorer's.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from elasticps.data.schema import Schema
from elasticps.data.score_rows import rows_batch
from elasticps.errors import InvalidArgumentError
from elasticps.trainer.export_chain import ExportChainError, read_inputs
from elasticps.trainer.model_dir import VersionRecord

SCORED_KINDS = ("binary", "multi_label", "float", "class")


class ScoringError(RuntimeError):
    """The model did not answer as a scorer needs (an output that is not one tensor of the
    right rows): the server's fault or the model code's, not the request's."""


@dataclass
class LoadedVersion:
    """A version ready to score: its record, model, schema and label; the timestamps a reader
    of ``/version`` sees (``loaded_at``, ``first_answer_at``: wall-clock seconds)."""

    record: VersionRecord
    model: torch.nn.Module
    schema: Schema
    inputs: dict[str, Any]
    loaded_at: float = 0.0
    load_s: float = 0.0  # reading, applying, building and warming it up
    first_answer_at: float | None = field(default=None)

    @classmethod
    def build(cls, record: VersionRecord, manifest: Mapping[str, Any],
              model: Any) -> LoadedVersion:
        """Check what the export records against what scoring needs."""
        if not isinstance(model, torch.nn.Module):
            raise ExportChainError(f"the model code returned a {type(model).__name__}, not a "
                                   "torch.nn.Module")
        if manifest.get("schema") is None:
            raise ExportChainError("the export records no dataset schema: rows cannot be "
                                   "read for it")
        schema = Schema.from_dict(manifest["schema"], where="the export's schema")
        inputs = read_inputs(dict(manifest))
        if inputs["label"]["kind"] not in SCORED_KINDS:
            raise ExportChainError(f"the export's label kind {inputs['label']['kind']!r} is "
                                   f"not one the server scores ({', '.join(SCORED_KINDS)})")
        if list(inputs["dense"]) != [c.name for c in schema.dense_columns]:
            raise ExportChainError(f"the export's inputs.dense {inputs['dense']} is not its "
                                   "schema's dense column order")
        loaded = cls(record, model.eval(), schema, inputs)
        loaded.warm_up()
        return loaded

    def warm_up(self) -> None:
        """Score one row of missing values before any request does: the first call of a
        model (and of the readers' kernels) is many times slower than the next."""
        # A schema where some value may not be missing: the first request warms it up.
        with contextlib.suppress(InvalidArgumentError):
            self.score([{}])

    @property
    def version(self) -> int:
        return self.record.version

    @property
    def classes(self) -> list[Any] | None:
        """A class label's values in output order (None for other kinds)."""
        label = self.inputs["label"]
        if label["kind"] != "class":
            return None
        values = label.get("values")
        return list(values) if values is not None else list(range(int(label["classes"])))

    def score(self, rows: Sequence[Any]) -> list[Any]:
        """The scores of ``rows``, one per row (module docstring); InvalidArgumentError for
        a bad row, naming it and its column."""
        batch = rows_batch(rows, self.schema)
        with torch.inference_mode():
            output = self.model(batch.to_torch())
        if not isinstance(output, torch.Tensor) or output.ndim == 0 \
                or output.shape[0] != len(rows):
            shape = list(output.shape) if isinstance(output, torch.Tensor) else type(output)
            raise ScoringError(f"the model returned {shape} for {len(rows)} rows; the server "
                               "scores models that return one tensor with a row per input")
        return scores(self.inputs["label"]["kind"], output.detach().cpu().numpy())


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow (as examples/tabular/score.py computes it)."""
    return np.asarray(np.exp(-np.logaddexp(0.0, -np.asarray(x, dtype=np.float64))))


def softmax(x: np.ndarray) -> np.ndarray:
    logits = np.asarray(x, dtype=np.float64)
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=1, keepdims=True))


def scores(kind: str, outputs: np.ndarray) -> list[Any]:
    """Per row, the score of ``kind`` (module docstring) as JSON values (non-finite: null)."""
    if kind in ("binary", "multi_label"):
        values = sigmoid(outputs)
    elif kind == "class":
        values = softmax(outputs.reshape(outputs.shape[0], -1))
    else:
        values = np.asarray(outputs, dtype=np.float64)
    if kind != "multi_label" and kind != "class" and values.ndim == 2 \
            and values.shape[1] == 1:
        values = values[:, 0]
    return [_json(row) for row in values]


def _json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [_json(v) for v in value]
    number = float(value)
    return number if math.isfinite(number) else None
