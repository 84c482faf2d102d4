from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from elasticps.data import open_dataset
from elasticps.data.dataset import table_to_raw
from elasticps.data.planted import PlantedModel
from elasticps.data.synth import synth_ctr
from elasticps.errors import DataError
from tests.unit.data.helpers import brute_force_auc


def read_all(url: str) -> pa.Table:
    ds = open_dataset(url)
    return pa.concat_tables([ds.read_chunk(chunk) for chunk in ds.chunks])


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "ctr"
    synth_ctr(str(out), 3000, 11, test_rows=800, rows_per_chunk=700, progress=False)
    return out


def test_stored_best_auc_is_the_auc_of_the_true_probabilities(synth_dir: Path) -> None:
    for url in (str(synth_dir), str(synth_dir / "test")):
        table = read_all(url)
        labels = table.column("label").to_numpy()
        p_true = table.column("p_true").to_numpy()
        manifest = open_dataset(url).manifest
        assert manifest.best_auc == pytest.approx(brute_force_auc(labels, p_true), abs=1e-12)
        # The planted model is learnable but not trivial, like real CTR data.
        assert manifest.best_auc is not None
        assert 0.7 < manifest.best_auc < 0.9
        assert 0.2 < manifest.label_rate < 0.3
        assert manifest.num_rows == table.num_rows


def test_p_true_is_the_planted_model_applied_to_the_stored_features(synth_dir: Path) -> None:
    manifest = open_dataset(str(synth_dir)).manifest
    assert manifest.planted_model is not None
    model = PlantedModel.from_dict(manifest.planted_model)
    table = read_all(str(synth_dir))
    raw = table_to_raw(table)
    p = model.probabilities(raw.dense, raw.dense_missing, raw.sparse, raw.sparse_missing)
    np.testing.assert_allclose(p, table.column("p_true").to_numpy(), rtol=1e-6)
    # Labels follow the probabilities: the click rate rises with p_true.
    labels = table.column("label").to_numpy()
    high = p > np.median(p)
    assert labels[high].mean() > 2 * labels[~high].mean()


def test_same_seed_same_rows_whatever_the_chunking(synth_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    synth_ctr(str(other), 1000, 11, rows_per_chunk=128, progress=False)
    # 1000 rows with another chunk size are the first 1000 rows of the 3000-row set.
    assert read_all(str(other)).equals(read_all(str(synth_dir)).slice(0, 1000))
    assert [c.num_rows for c in open_dataset(str(other)).chunks] == [128] * 7 + [104]
    different = tmp_path / "different"
    synth_ctr(str(different), 1000, 12, progress=False)
    assert not read_all(str(different)).equals(read_all(str(other)))


def test_test_split_is_linked_and_fresh(synth_dir: Path) -> None:
    ds = open_dataset(str(synth_dir))
    assert ds.manifest.splits == {"test": "test"}
    test = ds.split("test")
    assert test.num_rows == 800
    assert test.manifest.planted_model == ds.manifest.planted_model
    train_p = read_all(str(synth_dir)).column("p_true").to_numpy()[:800]
    test_p = read_all(test.url).column("p_true").to_numpy()
    assert not np.array_equal(train_p, test_p)
    with pytest.raises(DataError, match="no split 'valid'"):
        ds.split("valid")


def test_bad_arguments_are_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="rows=0"):
        synth_ctr(str(tmp_path / "a"), 0, 1)
    with pytest.raises(DataError, match=r"label_rate=1\.5"):
        synth_ctr(str(tmp_path / "a"), 10, 1, label_rate=1.5)
    assert not (tmp_path / "a").exists()
