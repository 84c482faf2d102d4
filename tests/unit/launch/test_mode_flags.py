"""`elasticps run --mode/--geo-steps` and PADDLE_TRAINING_MODE: parsed, checked, and handed to
every role's environment."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from elasticps.cli import build_parser
from elasticps.config import load_config
from elasticps.errors import ConfigError
from elasticps.launch.cli import _geo_steps
from elasticps.launch.launcher import LaunchOptions, build_specs


def _args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *flags, "train.py"])


def test_the_mode_reaches_every_role(tmp_path: Path) -> None:
    opts = LaunchOptions(script="train.py", trainers=1, pservers=1, mode="geo", geo_steps=3)
    specs = build_specs(opts, tmp_path, "file:///x.db", "job", {})
    assert {(s.env["PADDLE_TRAINING_MODE"], s.env["PADDLE_GEO_STEPS"]) for s in specs} == {
        ("geo", "3")}
    plain = build_specs(LaunchOptions(script="train.py"), tmp_path, "file:///x.db", "job",
                        {"PADDLE_TRAINING_MODE": "sync"})
    assert {s.env["PADDLE_TRAINING_MODE"] for s in plain} == {"sync"}  # no flag: the env's


def test_bad_modes_are_refused_naming_the_flag_or_variable() -> None:
    assert _args("--mode", "sync").mode == "sync"
    with pytest.raises(SystemExit):
        _args("--mode", "bsp")
    with pytest.raises(ConfigError, match="--geo-steps=4 needs --mode geo"):
        _geo_steps(_args("--mode", "sync", "--geo-steps", "4"))
    assert _geo_steps(_args("--mode", "geo", "--geo-steps", "4")) == 4
    with pytest.raises(ConfigError, match="PADDLE_TRAINING_MODE='bsp' is not one of"):
        load_config(env={"PADDLE_TRAINING_MODE": "bsp"})
    with pytest.raises(ConfigError, match="PADDLE_GEO_STEPS='0'"):
        load_config(env={"PADDLE_GEO_STEPS": "0"})
    assert load_config(env={}).mode == "async"
