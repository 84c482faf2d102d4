"""How a sparse table's rows are admitted and evicted, declared from the trainer:
``SparseEmbedding(..., admit=Admit(after=2), evict=Evict(ttl_passes=3), max_rows=...)``.

The pservers carry the policy out (docs/pserver.md, "Admission and eviction"); by default every
pushed id gets a row and rows live as long as the table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from elasticps.config import POLICY_KEYS
from elasticps.errors import ConfigError
from elasticps.proto import pserver_pb2

Policy = pserver_pb2.SparsePolicy
SCORE_SETTINGS = ("score_decay", "delete_threshold", "nonclk_coeff", "click_coeff")
_EVICT_MODES = {"lru": Policy.LRU, "lfu": Policy.LFU, "score": Policy.SCORE,
                None: Policy.EVICT_UNSPECIFIED}


@dataclass(frozen=True)
class Admit:
    """An id gets a row at its ``after``-th push (counted in a fixed-size sketch on the
    pserver), or, with ``probability`` > 0, at each push with that probability. Until then it
    reads its initial value and its gradients are dropped (counted)."""

    after: int = 1
    probability: float = 0.0

    def __post_init__(self) -> None:
        if not 1 <= self.after <= 1000:
            raise ConfigError(f"Admit(after={self.after!r}) must be in [1, 1000]")
        if not (math.isfinite(self.probability) and 0 <= self.probability <= 1):
            raise ConfigError(f"Admit(probability={self.probability!r}) must be in [0, 1]")
        if self.probability and self.after > 1:
            raise ConfigError("Admit takes after= or probability=, not both")


@dataclass(frozen=True)
class Evict:
    """Rows leave when unpushed for ``ttl_passes`` passes or ``ttl_seconds`` seconds, and, to
    keep a table within ``max_rows`` or its pserver's memory cap, the least recently (``"lru"``)
    or least often (``"lfu"``) pushed go first (None: never for room).

    ``"score"`` (CTR tables, as Paddle's CTR accessor): each row keeps a show and a click
    count (the trainer counts the examples showing each id, and the positive ones with 0/1
    labels), multiplied by ``score_decay`` at each pass end; when a pass begins, rows whose
    ``(show - click) * nonclk_coeff + click * click_coeff`` is below ``delete_threshold`` leave,
    and the lowest score goes first for room. Unset (None) settings take Paddle's defaults
    (0.98, 0.8, 0.1, 1.0); Paddle's ``delete_after_unseen_days`` is ``ttl_passes`` here."""

    ttl_passes: int = 0
    ttl_seconds: float = 0.0
    policy: Literal["lru", "lfu", "score"] | None = "lru"
    score_decay: float | None = None
    delete_threshold: float | None = None
    nonclk_coeff: float | None = None
    click_coeff: float | None = None

    def __post_init__(self) -> None:
        if self.ttl_passes < 0:
            raise ConfigError(f"Evict(ttl_passes={self.ttl_passes!r}) must be >= 0")
        if not (math.isfinite(self.ttl_seconds) and self.ttl_seconds >= 0):
            raise ConfigError(f"Evict(ttl_seconds={self.ttl_seconds!r}) must be finite, >= 0")
        if self.policy not in ("lru", "lfu", "score", None):
            raise ConfigError(f"Evict(policy={self.policy!r}) is not 'lru', 'lfu', 'score' or "
                              "None")
        for name in SCORE_SETTINGS:
            value = getattr(self, name)
            if value is None:
                continue
            if self.policy != "score":
                raise ConfigError(f"Evict({name}={value!r}) is a setting of policy='score', "
                                  f"not of policy={self.policy!r}")
            ok = isinstance(value, int | float) and not isinstance(value, bool) and \
                math.isfinite(value) and (0 < value <= 1 if name == "score_decay" else value >= 0)
            if not ok:
                limit = "in (0, 1]" if name == "score_decay" else "finite and >= 0"
                raise ConfigError(f"Evict({name}={value!r}) must be {limit}")


def policy_from_settings(table: str, settings: Mapping[str, Any]) -> pserver_pb2.SparsePolicy:
    """The policy a job spec's ``tables: {T: {...}}`` (or PADDLE_SPARSE_POLICIES) declares:
    ``admit_after``/``admit_probability`` as :class:`Admit`, ``ttl_passes``/``ttl_seconds``
    and ``evict`` ("lru", "lfu" or "none": nothing leaves for room) as :class:`Evict`, and
    ``max_rows``; ConfigError naming the table and the bad setting. Unset settings keep the
    defaults (every pushed id gets a row, kept for the table's life)."""
    unknown = sorted(set(settings) - POLICY_KEYS)
    if unknown:
        raise ConfigError(f"sparse table {table!r}: unknown setting(s) {unknown}; known: "
                          f"{sorted(POLICY_KEYS)}")
    get = settings.get
    for key in ("admit_after", "ttl_passes", "max_rows"):
        if not isinstance(get(key, 0), int) or isinstance(get(key, 0), bool):
            raise ConfigError(f"sparse table {table!r}: {key}={get(key)!r} is not an integer")
    for key in ("admit_probability", "ttl_seconds", *SCORE_SETTINGS):
        if not isinstance(get(key, 0), int | float) or isinstance(get(key, 0), bool):
            raise ConfigError(f"sparse table {table!r}: {key}={get(key)!r} is not a number")
    evict = get("evict")  # unset: as the layers' evict=None (max_rows alone means LRU)
    if evict not in ("lru", "lfu", "score", "none", None):
        raise ConfigError(f"sparse table {table!r}: evict={evict!r} is not 'lru', 'lfu', "
                          "'score' or 'none'")
    if not 1 <= get("admit_after", 1) <= 1000:
        raise ConfigError(f"sparse table {table!r}: admit_after={get('admit_after')!r} must be "
                          "in [1, 1000] (1: every pushed id gets a row)")
    try:
        admit = Admit(get("admit_after", 1), float(get("admit_probability", 0.0)))
        score = {key: float(value) for key in SCORE_SETTINGS
                 if (value := get(key)) is not None}
        expiry = Evict(int(get("ttl_passes", 0)), float(get("ttl_seconds", 0.0)),
                       None if evict in ("none", None) else evict, **score)
        return policy_proto(table, admit, expiry, int(get("max_rows", 0)))
    except ConfigError as exc:
        named = str(exc) if str(exc).startswith("sparse table") else \
            f"sparse table {table!r}: {exc}"
        raise ConfigError(named) from exc


def policy_proto(table: str, admit: Admit | None, evict: Evict | str | None,
                 max_rows: int) -> pserver_pb2.SparsePolicy:
    """The wire form; ``evict="lfu"`` is short for ``Evict(policy="lfu")``."""
    if isinstance(evict, str):
        evict = Evict(policy=evict)  # type: ignore[arg-type]  # checked in __post_init__
    if max_rows < 0:
        raise ConfigError(f"sparse table {table!r}: max_rows={max_rows!r} must be >= 0")
    if max_rows and (evict is None or evict.policy is None):
        evict = Evict(evict.ttl_passes, evict.ttl_seconds) if evict else Evict()
    out = Policy(max_rows=max_rows)
    if admit is not None:
        out.admit_after = admit.after if admit.after > 1 else 0
        out.admit_probability = admit.probability
    if evict is not None:
        out.ttl_passes, out.ttl_seconds = evict.ttl_passes, evict.ttl_seconds
        out.evict = _EVICT_MODES[evict.policy]
        for name in SCORE_SETTINGS:
            if getattr(evict, name) is not None:
                setattr(out, name, float(getattr(evict, name)))
    return out
