"""``elasticps trainer SCRIPT``: the process a trainer is."""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

import pytest

from elasticps.launch.cli import trainer_command


def test_the_trainer_leaves_its_objects_to_the_process_exit(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """Once the script is over the heap is frozen: the collector's pass over everything torch
    and the model made would only delay the exit, and with it the job's end."""
    script = tmp_path / "train.py"
    script.write_text("trained = [object() for _ in range(3)]\n")
    monkeypatch.setenv("PADDLE_STORE", f"file://{tmp_path}/job.db")
    monkeypatch.setenv("PADDLE_ROLE", "trainer")  # restored after the test (the command sets it)
    gc.unfreeze()
    try:
        assert trainer_command(argparse.Namespace(script=str(script), script_args=[])) == 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
