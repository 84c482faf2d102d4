"""A table in memory trained as the job's dataset (elasticps/trainer/table_reader.py): written
once, found by every other trainer, checked against each trainer's own table. Real files and a
real embedded store; several "trainers" are several calls with their own config."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from elasticps.config import Config, load_config
from elasticps.data import open_dataset, write_dataset
from elasticps.errors import ConfigError
from elasticps.reader import TableReader, from_arrow, from_pandas
from elasticps.store import open_store
from elasticps.store.keys import InitMarker, TableDataset, table_keys
from elasticps.trainer.dataset_reader import DatasetReader, as_dataset_reader, read_whole
from tests.helpers import wait_for

SCHEMA = {"label": "clicked", "columns": {"age": "dense", "country": "categorical",
                                          "genres": {"kind": "multi_categorical", "sep": "|"}}}


def frame(rows: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "clicked": rng.integers(0, 2, rows),
        "age": np.where(rng.random(rows) < 0.1, np.nan, rng.normal(40, 10, rows)),
        "country": rng.choice(["de", "fr", "jp", None], rows),
        "genres": rng.choice(["Drama|War", "Comedy", "", "Action|Drama"], rows),
    })


def job(tmp_path: Path, trainer: int, name: str = "tables") -> Config:
    return load_config(env={}, store=f"file://{tmp_path}/store.db", job_name=name,
                       workdir=str(tmp_path / "work"), trainer_id=trainer, lease_ttl=2)


def batches(url: str) -> list[tuple[object, ...]]:
    return [(b.label.tolist(), b.dense.tolist(), {k: v.tolist() for k, v in b.ids.items()},
             {k: (v.values.tolist(), v.offsets.tolist()) for k, v in b.bags.items()})
            for b in open_dataset(url).iter_batches(1000)]


def test_the_first_trainer_writes_the_table_and_the_others_train_on_what_it_wrote(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "elasticps.trainer.table_reader")
    reader = from_pandas(frame(), SCHEMA, batch_size=100)
    first = reader.in_job(job(tmp_path, 0))
    second = from_pandas(frame(), SCHEMA, batch_size=100).in_job(job(tmp_path, 1))
    assert first == second
    # What Trainer.train and evaluate do with it: the same dataset, resolved once.
    assert as_dataset_reader(reader) is first
    assert read_whole(reader)[1] == first.dataset_url
    assert (first.batch_size, first.dataset_url.startswith(str(tmp_path / "work" / "datasets")))\
        == (100, True)
    assert sum("wrote table 'table'" in r.getMessage() for r in caplog.records) == 1
    # The same dataset write_dataset makes of the frame: rows, dtypes, statistics, hashing.
    write_dataset(frame(), str(tmp_path / "direct"), SCHEMA)
    assert open_dataset(first.dataset_url).schema == open_dataset(str(tmp_path / "direct")).schema
    assert batches(first.dataset_url) == batches(str(tmp_path / "direct"))


def test_a_trainer_whose_table_differs_is_refused_naming_both_fingerprints(
        tmp_path: Path) -> None:
    from_pandas(frame(seed=0), SCHEMA).in_job(job(tmp_path, 0))
    other = from_pandas(frame(seed=1), SCHEMA)  # an unseeded sample would do this
    with pytest.raises(ConfigError, match=r"fingerprint [0-9a-f]{16}.*trains on the one "
                                          r"trainer-0-.* built \([0-9a-f]{16}"):
        other.in_job(job(tmp_path, 1))


def test_a_dead_writers_lock_goes_with_its_lease_and_a_waiting_trainer_writes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "elasticps.trainer.table_reader")
    config = job(tmp_path, 1)
    assert config.store is not None
    found: list[DatasetReader] = []
    with open_store(config.store, config.job_name) as store:
        lease = store.grant_lease(30)
        lock, done = table_keys("table")
        store.put(lock, InitMarker("trainer-0-dead", "lock").encode(), lease.id)
        waiter = threading.Thread(
            target=lambda: found.append(from_pandas(frame(), SCHEMA).in_job(config)))
        waiter.start()
        wait_for(lambda: any("waits for another trainer" in r.getMessage()
                             for r in caplog.records), 30, "the trainer to wait for the lock")
        assert not found
        lease.revoke()  # the writer died: its lease went, and its lock with it
        waiter.join(timeout=60)
        written = store.get(done)
        assert written is not None
    assert found
    assert TableDataset.decode(written.value, done).by.startswith("trainer-1-")
    assert sum(len(b.label) for b in open_dataset(found[0].dataset_url).iter_batches(1000)) \
        == 3000


def test_the_next_job_in_the_workdir_reuses_the_written_table(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "elasticps.trainer.table_reader")
    first = from_pandas(frame(), SCHEMA).in_job(job(tmp_path, 0, name="first"))
    manifest = Path(first.dataset_url) / "manifest.json"
    written = manifest.stat().st_mtime_ns
    again = from_pandas(frame(), SCHEMA).in_job(job(tmp_path, 0, name="second"))
    assert again.dataset_url == first.dataset_url
    assert manifest.stat().st_mtime_ns == written
    assert any("already written" in r.getMessage() for r in caplog.records)
    changed = from_pandas(frame().head(2000), SCHEMA).in_job(job(tmp_path, 0, name="third"))
    assert changed.dataset_url != first.dataset_url


def test_a_test_split_is_read_like_its_training_table(tmp_path: Path) -> None:
    train = from_pandas(frame(), SCHEMA)
    test = from_pandas(frame(500, seed=3), SCHEMA, name="test", like=train)
    url = test.in_job(job(tmp_path, 0)).dataset_url
    train_schema = open_dataset(train.in_job(job(tmp_path, 0)).dataset_url).schema
    assert open_dataset(url).schema == train_schema  # the training data's statistics


def test_without_a_schema_the_guess_trains_and_is_logged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "elasticps.trainer.table_reader")
    reader = from_arrow({"clicked": [0, 1] * 600, "age": [30.0, 41.5] * 600,
                         "country": ["de", "fr", "jp"] * 400}).in_job(job(tmp_path, 0))
    kinds = {c.name: c.kind for c in open_dataset(reader.dataset_url).schema.columns}
    assert kinds == {"age": "dense", "country": "categorical"}
    assert any("pass schema= to change it" in r.getMessage() and "country" in r.getMessage()
               for r in caplog.records)


def test_bad_use_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="takes a pandas DataFrame, not dict"):
        from_pandas({"clicked": [1]}, SCHEMA)
    with pytest.raises(ConfigError, match="name='Bad Name' must be"):
        from_pandas(frame(), SCHEMA, name="Bad Name")
    with pytest.raises(ConfigError, match="has no rows"):
        from_pandas(frame().head(0), SCHEMA)
    reader = from_pandas(frame(), SCHEMA)
    assert isinstance(reader, TableReader)
    with pytest.raises(ConfigError, match="is trained inside a job"):
        reader.in_job(load_config(env={}))
    no_workdir = load_config(env={}, store=f"file://{tmp_path}/store.db", job_name="x")
    with pytest.raises(ConfigError, match="pass url="):
        reader.in_job(no_workdir)
