"""The model's code: a function that rebuilds the PyTorch module from an export.

An export holds weights and what the model reads, not the model's class, so the server runs
the user's own code for it, named by whoever starts the server (``--model FILE.py:FUNCTION``
or ``package.module:FUNCTION``), never by the model directory: a directory's contents only
ever become tensors and JSON. The function is called as::

    build(tensors, manifest) -> torch.nn.Module

with ``tensors`` what a full export's safetensors file holds (dense names, ``sparse/T/ids``,
``sparse/T/rows``; base and deltas applied) and ``manifest`` the newest link's manifest (its
``schema``, ``inputs``, ``layers`` and ``meta``). ``examples/tabular/score.py:model_from_export``
is one.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from elasticps.errors import ConfigError

Builder = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]


def load_builder(spec: str) -> Builder:
    """The function ``spec`` names: ``path/to/file.py:function`` or ``module:function``."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ConfigError(f"--model {spec!r} must be FILE.py:FUNCTION or MODULE:FUNCTION")
    module = _module_from_file(Path(where)) if where.endswith(".py") else _module(where, spec)
    build = getattr(module, name, None)
    if not callable(build):
        raise ConfigError(f"--model {spec!r}: {where} has no function {name!r}")
    return build


def _module(name: str, spec: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(f"--model {spec!r}: cannot import {name}: {exc}") from exc


def _module_from_file(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"--model: {path} is not a file")
    # A name of its own per file: two examples' score.py must not share a module.
    name = "elasticps_serve_model_" + hashlib.sha256(
        str(path.resolve()).encode()).hexdigest()[:12]
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise ConfigError(f"--model: cannot load {path} as Python")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    found.loader.exec_module(module)
    return module
