#!/usr/bin/env bash
# The image's lock: requirements.lock, every Python package the image installs besides torch,
# pinned at the version constraints.txt gives it and with the sha256 of each of its files on
# PyPI, for `pip install --require-hashes -r requirements.lock` in the Dockerfile.
#
# constraints.txt is the one list of versions (the test suite runs on it); this lock is made
# from it, and tests/unit/test_image_lock.py fails when the two disagree. To move a pin: change
# constraints.txt, run scripts/setup.sh, scripts/test.sh, then this script.
#
# What is locked: elasticps's dependencies (pyproject.toml) with its object-store extras s3 and
# gcs, torch's own dependencies (torch itself comes from the PyTorch index of the image's
# TORCH_VARIANT), and setuptools and wheel, which build the elasticps wheel in the image.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
input=$(mktemp --suffix=.in)
trap 'rm -f "$input"' EXIT
"$py" - >"$input" <<'PY'
import importlib.metadata
import tomllib

from packaging.requirements import Requirement

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
wanted = [*project["dependencies"], *project["optional-dependencies"]["s3"],
          *project["optional-dependencies"]["gcs"]]
wanted += [r for r in importlib.metadata.requires("torch") or []
           if Requirement(r).marker is None or Requirement(r).marker.evaluate({"extra": ""})]
for line in sorted({str(Requirement(r)) for r in wanted if Requirement(r).name != "torch"}):
    print(line)
print("setuptools\nwheel")
PY
# Only PyPI, whatever this machine's pip configuration adds: the hashes must be those of the
# files the image downloads.
PIP_CONFIG_FILE=/dev/null .venv/bin/pip-compile --quiet --generate-hashes --allow-unsafe \
    --constraint constraints.txt --strip-extras --no-emit-index-url --no-emit-find-links \
    --no-header --no-annotate --output-file requirements.lock "$input"
sed -i "1i # Made by scripts/lock.sh from constraints.txt: do not edit (see that script)." \
    requirements.lock
echo "requirements.lock: $(grep -c '^[A-Za-z]' requirements.lock) packages"
