"""examples/ctr on Criteo text converted by ``elasticps data convert criteo`` trains exactly as on
the format-1 dataset holding the same rows: one trainer and one pserver (SGD, no prefetch) end
with the same parameters, and the example takes the id space and dense norm the converted
dataset declares (asking for others is refused before anything starts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from elasticps.data.criteo_convert import convert_criteo
from elasticps.data.criteo_export import dataset_to_criteo_text
from elasticps.data.synth import synth_ctr
from tests.helpers import REPO
from tests.integration.examples.jobs import run_job

SCRIPT = "examples/ctr/train.py"
ARGS = ["--passes", "1", "--hidden", "16", "--batch-size", "250", "--optimizer", "sgd",
        "--lr", "0.05", "--no-prefetch", "--id-space", "10007"]


def test_a_converted_criteo_dataset_trains_as_its_format_1_twin(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    synth_ctr(str(v1), 3000, 3, rows_per_chunk=500, max_vocab=20, num_crosses=0,
              progress=False)
    text = tmp_path / "rows.tsv"
    dataset_to_criteo_text(str(v1), str(text))
    v2 = tmp_path / "v2"
    convert_criteo([str(text)], str(v2), id_space=10007, rows_per_chunk=500, progress=False)

    exports = {}
    for name, data in (("v1", v1), ("v2", v2)):
        job = run_job(SCRIPT, tmp_path / f"job-{name}", ["--data", str(data), *ARGS],
                      trainers=1, pservers=1)
        assert job.summary["samples"] == 3000
        exports[name] = load_file(str(job.workdir / "model" / "model.safetensors"))
    assert sorted(exports["v1"]) == sorted(exports["v2"])
    for key, value in exports["v1"].items():
        np.testing.assert_array_equal(exports["v2"][key], value, err_msg=key)
    assert any(key.endswith("/ids") and value.size > 26 for key, value in exports["v1"].items())

    refused = subprocess.run(
        [sys.executable, str(REPO / SCRIPT), "--data", str(v2), "--dense-norm", "minmax",
         "--workdir", str(tmp_path / "refused")],
        capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 1
    assert "declares --dense-norm log-missing" in refused.stderr
