"""The ``elasticps`` command line itself: building it imports no heavy package, and it runs
from a user's shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

# Packages some command needs when it runs and `elasticps --help` never needs (each takes from a
# tenth of a second to seconds to import): building the parser must load none of them.
HEAVY = ("aetcd", "cryptography", "fsspec", "google", "grpc", "kubernetes", "numpy", "pandas",
         "prometheus_client", "pyarrow", "rich", "safetensors", "torch", "yaml")


def test_building_the_parser_imports_no_heavy_package() -> None:
    script = ("import sys, elasticps.cli; elasticps.cli.build_parser(); "
              "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))")
    done = subprocess.run([sys.executable, "-c", script, *HEAVY], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"building the parser imported {done.stdout.strip()}"


def test_python_m_elasticps_runs_from_a_users_shell(tmp_path: Path) -> None:
    """The installed package, as a shell without PYTHONPATH starts it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "elasticps", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for command in ("run", "master", "pserver", "data", "chaos", "submit", "status", "env"):
        assert f"\n    {command} " in done.stdout, command
    assert "Run `elasticps COMMAND --help`" in done.stdout

