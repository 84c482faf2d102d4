"""`elasticps run --warm-start MODEL_DIR`: checked, handed to every role as an absolute
PADDLE_WARM_START, resolved by the trainer to an export (itself, or a model directory's
LATEST version), and read by Trainer.connect before it joins the job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from elasticps.cli import build_parser
from elasticps.config import load_config
from elasticps.errors import ConfigError
from elasticps.launch.cli import run_command
from elasticps.launch.launcher import LaunchOptions, build_specs
from elasticps.trainer.model_dir import VersionRecord
from elasticps.trainer.trainer import Trainer
from elasticps.trainer.warm_start import export_of


def test_the_flag_reaches_the_roles_as_an_absolute_path(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    args = build_parser().parse_args(["run", "--warm-start", "models", "train.py"])
    assert args.warm_start == "models"
    specs = build_specs(LaunchOptions(script="train.py", warm_start="models"), tmp_path,
                        "file:///x.db", "job", {})
    assert {s.env["PADDLE_WARM_START"] for s in specs} == {str(tmp_path / "models")}
    plain = build_specs(LaunchOptions(script="train.py"), tmp_path, "file:///x.db", "job", {})
    assert all("PADDLE_WARM_START" not in s.env for s in plain)


def test_a_missing_directory_is_refused_before_anything_starts(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    args = build_parser().parse_args(
        ["run", "--workdir", str(tmp_path / "w"), "--warm-start", str(tmp_path / "nope"),
         str(script)])
    with pytest.raises(ConfigError, match=r"--warm-start '.*nope' is not a directory"):
        run_command(args)
    assert not (tmp_path / "w").exists()


def test_a_model_directory_resolves_to_the_version_its_pointer_names(tmp_path: Path) -> None:
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "manifest.json").write_text("{}")
    assert export_of(tmp_path / "export") == tmp_path / "export"
    pointer = VersionRecord(7, "versions/000007", "delta", 5, 2).to_dict()
    (tmp_path / "LATEST").write_text(json.dumps(pointer))
    assert export_of(tmp_path) == tmp_path / "versions" / "000007"
    # the model directory's own reader decides: a pointer it refuses, warm start refuses
    for bad in ({**pointer, "path": "/etc"}, {**pointer, "path": "../x"},
                {"version": 7, "path": "versions/000007"}, [1]):
        (tmp_path / "LATEST").write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match="--warm-start"):
            export_of(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"neither an export .* nor a model directory"):
        export_of(tmp_path / "empty")


def test_connect_starts_from_the_environments_export_before_it_joins(tmp_path: Path) -> None:
    config = load_config(env={"PADDLE_STORE": f"file://{tmp_path}/store.db",
                              "PADDLE_WARM_START": str(tmp_path)})
    trainer = Trainer(torch.nn.Linear(2, 1))
    with pytest.raises(ConfigError, match="neither an export"):
        trainer.connect(config)
    assert not (tmp_path / "store.db").exists()  # refused before it joined the job
