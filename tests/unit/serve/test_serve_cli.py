"""``elasticps serve``'s command line, in-process: its help, and bad options or a model
directory another user could change refused before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import run_cli

MODEL = "tests/unit/serve/tiny_model.py:build"


def test_help_shows_the_endpoints_and_an_example() -> None:
    shown = run_cli("serve", "--help")
    assert shown.returncode == 0
    for text in ("POST /score", "GET /healthz", "--port", "--model", "127.0.0.1",
                 "elasticps serve /models/shop"):
        assert text in shown.stdout


@pytest.mark.parametrize(("argv", "message"), [
    (["--port", "70000"], "--port 70000 is not a port"),
    (["--max-rows", "0"], "--max-rows must be > 0"),
    (["--poll", "-1"], "--poll must be > 0"),
    (["--model", "nocolon"], "--model 'nocolon' must be FILE.py:FUNCTION"),
    (["--model", "tests/unit/serve/tiny_model.py:nothing"], "has no function 'nothing'"),
])
def test_a_bad_option_is_refused_naming_it(tmp_path: Path, argv: list[str],
                                           message: str) -> None:
    done = run_cli("serve", str(tmp_path), "--model", MODEL, *argv)
    assert done.returncode != 0
    assert message in done.stderr


def test_a_model_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "models"
    shared.mkdir()
    os.chmod(shared, 0o777)
    done = run_cli("serve", str(shared), "--model", MODEL)
    assert done.returncode != 0
    assert "can be written by other users" in done.stderr
