"""``elasticps run`` starts a job's processes only once it has imported itself and written the
job's certificates: what it imports delays every one of them."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO

# What the roles need and the launcher does not (a tenth of a second or more each to import).
ROLE_PACKAGES = ("grpc", "numpy", "prometheus_client", "pyarrow", "torch", "pandas")


def test_the_launcher_imports_no_package_only_its_roles_need() -> None:
    script = ("import sys, elasticps.cli as c; c.build_parser(sys.argv[1:]); "
              "import elasticps.launch.launcher, elasticps.rpc.job_ca; "
              f"print(sorted(m for m in {ROLE_PACKAGES!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script, "run", "train.py"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
