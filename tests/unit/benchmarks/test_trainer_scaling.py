"""`benchmarks/trainer_scaling.py`: its figures from the jobs' summaries, and its flags."""

from __future__ import annotations

import argparse
import sys

import pytest

from tests.helpers import REPO

sys.path.append(str(REPO / "benchmarks"))  # trainer_scaling and its run_facts, by bare name
from trainer_scaling import counts, scaling


def _run(sps: float, auc: float | None = 0.7) -> dict[str, object]:
    return {"samples_per_sec": sps, "auc": auc}


def test_efficiency_is_each_trainers_share_against_one_trainers_speed() -> None:
    rows = scaling({4: [_run(60_000)], 1: [_run(20_000), _run(22_000), _run(30_000)],
                    2: [_run(40_000, None), _run(36_000)]})
    assert [r["trainers"] for r in rows] == [1, 2, 4]
    assert [r["samples_per_sec"] for r in rows] == [22_000, 38_000, 60_000]  # medians
    assert [r["per_trainer_sps"] for r in rows] == [22_000, 19_000, 15_000]
    assert [r["efficiency"] for r in rows] == pytest.approx([1.0, 19 / 22, 15 / 22])
    assert rows[1]["auc"] == 0.7  # a run without an AUC is left out of the median


@pytest.mark.parametrize("text", ["", "0,1", "1,1", "two", "1,-2"])
def test_bad_trainer_counts_are_refused_naming_the_value(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=repr(text)):
        counts(text)
    assert counts("8,1,2") == [8, 1, 2]
