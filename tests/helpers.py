"""Small helpers shared by tests: polling with a deadline (never sleep to synchronise), each
test job's TLS identities and credentials, and the ``elasticps`` command line run in-process."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import io
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from elasticps import cli
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.tls import TlsIdentity, write_job_identities
from elasticps.telemetry import logfmt

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]  # the repository root


def load_example(path: str) -> ModuleType:
    """An example's module (``examples/tabular/score.py``) under a name of its own.

    The examples import their siblings by bare name (``from models import ...``) and several
    have a ``models.py``, so the siblings another test already imported are set aside while
    this one runs and put back after: each example gets its own directory's modules."""
    name = "example_" + path.removesuffix(".py").replace("/", "_").removeprefix("examples_")
    if name in sys.modules:
        return sys.modules[name]
    source = REPO / path
    siblings = {p.stem for folder in (source.parent, source.parent.parent)
                for p in folder.glob("*.py")} | {p.name for p in source.parent.parent.iterdir()
                                                   if p.is_dir()}
    set_aside = {bare: sys.modules.pop(bare) for bare in siblings if bare in sys.modules}
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        for bare in siblings:
            sys.modules.pop(bare, None)
        sys.modules.update(set_aside)
    return module


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition", *,
             interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def kill_quietly(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


TOKEN = "test-token"
# One directory of test identities shared with the test's child processes (they inherit the
# variable), so a master started by a test and the test's own clients trust the same CA.
_TLS_ROOT_VAR = "ELASTICPS_TEST_TLS_ROOT"
if _TLS_ROOT_VAR not in os.environ:
    os.environ[_TLS_ROOT_VAR] = tempfile.mkdtemp(prefix="elasticps-test-tls-")
    atexit.register(shutil.rmtree, os.environ[_TLS_ROOT_VAR], True)


def job_tls(job: str) -> dict[str, Path]:
    """The TLS identity directories (one per role) of test job ``job``: made by the first
    process that asks (written aside, then renamed into place), read by every other."""
    root = Path(os.environ[_TLS_ROOT_VAR]) / job
    if not root.exists():
        staging = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{job}-"))
        write_job_identities(staging, job)
        try:
            staging.rename(root)
        except OSError:  # another process made it first: use theirs
            shutil.rmtree(staging, ignore_errors=True)
    return {role: root / role for role in ("master", "pserver", "trainer")}


def tls_env(job: str, role: str) -> dict[str, str]:
    """The environment that gives a role process of ``job`` its TLS identity."""
    return {"PADDLE_TLS_DIR": str(job_tls(job)[role])}


def job_credentials(job: str, role: str = "trainer", token: str = TOKEN) -> JobCredentials:
    """Credentials of a ``role`` process of test job ``job`` (mutual TLS + the token)."""
    return JobCredentials(job, token, TlsIdentity.load(job_tls(job)[role]))


@dataclass(frozen=True)
class CliResult:
    """What a test reads of one ``elasticps`` command: as ``subprocess.run`` would give it."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*argv: str, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
            stdin: str = "") -> CliResult:
    """``elasticps ARGV`` run by :func:`elasticps.cli.main` in this process, seen as a test sees
    ``python -m elasticps ARGV``: the exit code (``SystemExit`` from argparse, ``--help`` and
    ``--version`` included; an uncaught exception is 1, its traceback on stderr), and stdout and
    stderr as text, log lines and warnings included.

    ``env``, like ``subprocess.run``'s, is the command's whole environment (None: this one);
    ``cwd`` its working directory; ``stdin`` what it reads. Both are this process's, so the
    test's own threads see them too while the command runs. Everything the command changes of
    this process is put back afterwards: the environment, the directory, the standard streams,
    the root logger, the log context, signal handlers and warning filters. A command that leaves
    a non-daemon thread running would keep a real process alive: that fails here.

    For what needs a real process (signals, ``--exit-with-parent``, a server the test talks to
    while it runs, whole jobs), start ``python -m elasticps`` instead.
    """
    out, err = io.StringIO(), io.StringIO()
    threads = set(threading.enumerate())
    with _process_state_kept(env, cwd), warnings.catch_warnings():
        _interpreter_warnings(err)
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:
            code = _exit_code(exc.code, err)
        except Exception:
            traceback.print_exc(file=err)
            code = 1
        # The interpreter waits for non-daemon threads before it exits; one that never ends
        # would hang the process.
        left = [t for t in set(threading.enumerate()) - threads if not t.daemon]
        for thread in left:
            thread.join(timeout=10)
        running = [t.name for t in left if t.is_alive()]
        assert not running, f"elasticps {' '.join(argv)} left threads running: {running}"
    return CliResult(code, out.getvalue(), err.getvalue())


def _exit_code(code: Any, err: io.StringIO) -> int:
    """The status a process exits with for ``sys.exit(code)``."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=err)
    return 1


def _interpreter_warnings(err: io.StringIO) -> None:
    """Warnings shown on stderr as a fresh interpreter shows them (pytest records them)."""
    warnings.resetwarnings()
    warnings.simplefilter("default")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                     ResourceWarning):
        warnings.simplefilter("ignore", category)

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        err.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


@contextlib.contextmanager
def _process_state_kept(env: Mapping[str, str] | None,
                        cwd: str | Path | None) -> Iterator[None]:
    environ, directory = dict(os.environ), os.getcwd()
    streams = sys.stdin, sys.stdout, sys.stderr
    root = logging.getLogger()
    handlers, level, log_context = list(root.handlers), root.level, logfmt.context()
    handled = {sig: signal.getsignal(sig) for sig in signal.valid_signals()}
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        os.chdir(directory)
        os.environ.clear()
        os.environ.update(environ)
        root.handlers[:] = handlers
        root.setLevel(level)
        logfmt.set_context(**log_context)
        for sig, handler in handled.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
