from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from elasticps.data.metrics import auc, log_loss
from elasticps.errors import DataError
from tests.unit.data.helpers import brute_force_auc


@pytest.mark.parametrize("levels", [3, 50, None])
def test_auc_equals_brute_force_with_and_without_ties(levels: int | None) -> None:
    rng = np.random.default_rng(levels or 0)
    labels = (rng.random(700) < 0.3).astype(np.int64)
    noise = rng.random(700)
    scores = labels * 0.3 + noise if levels is None else rng.integers(0, levels, 700) + labels
    assert auc(labels, scores) == pytest.approx(brute_force_auc(labels, scores), abs=1e-12)


def test_auc_extremes_and_degenerate_input() -> None:
    labels = np.array([0, 0, 1, 1])
    assert auc(labels, np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
    assert auc(labels, np.array([0.4, 0.3, 0.2, 0.1])) == 0.0
    assert auc(labels, np.ones(4)) == 0.5
    assert math.isnan(auc(np.ones(3), np.array([0.1, 0.2, 0.3])))
    with pytest.raises(DataError, match="differ in length"):
        auc(labels, np.ones(3))
    with pytest.raises(DataError, match="0 or 1"):
        auc(np.array([0, 2]), np.ones(2))


def test_log_loss_matches_the_definition() -> None:
    labels = np.array([1, 0, 1, 0])
    probs = np.array([0.9, 0.2, 0.6, 0.0])
    expected = -(math.log(0.9) + math.log(0.8) + math.log(0.6) + math.log(1 - 1e-7)) / 4
    assert log_loss(labels, probs) == pytest.approx(expected)


def test_the_packages_lazy_names_stay_functions_after_every_data_module_is_imported() -> None:
    """A lazy name that is also a submodule's name would turn into that module once the
    submodule is imported (import order then decides what ``from elasticps.data import auc``
    gives): no lazy name may be a module of the package."""
    import importlib
    import pkgutil

    import elasticps.data as data

    for module in pkgutil.iter_modules(data.__path__):
        importlib.import_module(f"elasticps.data.{module.name}")
    for name in data.__all__:
        assert not inspect.ismodule(getattr(data, name)), name
