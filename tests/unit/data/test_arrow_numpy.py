"""Arrow arrays read as numpy from their buffers (elasticps/data/arrow_numpy.py), and the read
path that uses them: reading a chunk loads no pandas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from elasticps.data import write_dataset
from elasticps.data.arrow_numpy import bool_numpy, fixed_width_numpy, int_numpy
from tests.helpers import REPO

INTS = pa.array([3, None, 7, -2, None, 11, 5, 0, 9, None], pa.int32())
BOOLS = pa.array([True, None, False, True, True, None, False, True, False, True])


@pytest.mark.parametrize(("offset", "length"), [(0, 10), (1, 9), (3, 5), (9, 1), (4, 0)])
def test_ints_and_booleans_match_pyarrow_at_any_offset(offset: int, length: int) -> None:
    ints, bools = INTS.slice(offset, length), BOOLS.slice(offset, length)
    expected_missing = np.array(ints.is_null().to_pylist(), dtype=bool)
    values, missing = fixed_width_numpy(ints)
    assert missing.tolist() == expected_missing.tolist()
    assert values[~missing].tolist() == [v for v in ints.to_pylist() if v is not None]
    assert int_numpy(ints, fill=-99).tolist() == [-99 if v is None else v
                                                  for v in ints.to_pylist()]
    assert bool_numpy(bools).tolist() == [bool(v) for v in bools.to_pylist()]


def test_an_array_without_nulls_is_a_view_of_its_buffer() -> None:
    array = pa.array(np.arange(20, dtype=np.int64)).slice(5, 10)
    values = int_numpy(array)
    assert values.tolist() == list(range(5, 15))
    assert not values.flags.owndata  # read in place, not copied


def test_reading_a_chunk_of_every_column_kind_loads_no_pandas(tmp_path: Path) -> None:
    """A trainer reads chunks and never needs pandas: importing it costs a third of a second
    of a job's start."""
    columns = {
        "y": [1, 0, 1, 0],
        "country": ["de", None, "fr", "de"],
        "user": [5, 7, None, 5],
        "genres": [["a", "b"], None, [], ["c", None]],
        "review": ["Great phone, GREAT price!", None, " ", "ok"],
        "age": [30.5, None, 41.0, 22.0],
    }
    schema = {"label": "y", "columns": {
        "country": "categorical", "user": "categorical",
        "genres": {"kind": "multi_categorical"}, "review": {"kind": "text"}, "age": "dense"}}
    write_dataset(columns, str(tmp_path / "data"), schema)
    script = ("import sys\n"
              "from elasticps.data import iter_batches, read_manifest\n"
              f"url = {str(tmp_path / 'data')!r}\n"
              "batch = next(iter(iter_batches(url, read_manifest(url).chunks[0], 4)))\n"
              "print(len(batch), sorted(batch.ids), sorted(batch.bags), 'pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "['country',", "'user']", "['genres',", "'review']",
                                   "False"]
