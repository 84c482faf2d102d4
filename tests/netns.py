"""Network namespaces for partition tests: two namespaces joined by one veth pair.

``NetnsPair.create()`` makes two fresh namespaces (each with ``lo`` up) and a veth pair with one
end in each and a private /24 between them. Processes are started inside a namespace with
``ip netns exec`` (:meth:`NetnsPair.popen`), each in its own session so it can be ended by
process group. :meth:`NetnsPair.cut` takes the link down (a partition: from the other side,
packets vanish without an answer), :meth:`NetnsPair.heal` brings it back.

Both ends of every connection must be inside the namespaces: the main namespace has no route
to their addresses. Needs root and iproute2; :func:`unavailable_reason` says why not.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import wait_for


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                            check=False)
    if result.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed ({result.returncode}): "
                           f"{result.stderr.strip()}")


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (this test runs `ip netns add`)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"eps-probe-{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except (RuntimeError, OSError) as exc:
        return f"cannot create a network namespace: {exc}"
    with contextlib.suppress(RuntimeError, OSError):
        _ip("netns", "delete", probe)
    return None


@dataclass
class NetnsPair:
    """Namespaces ``a`` and ``b`` joined by veth ends ``a_dev`` (``a_ip``) and ``b_dev``
    (``b_ip``). Names carry a random tag so concurrent runs never collide."""

    a: str
    b: str
    a_dev: str
    b_dev: str
    a_ip: str
    b_ip: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    def create(cls, a: str = "rest", b: str = "cut", subnet: str = "10.213.0") -> NetnsPair:
        tag = secrets.token_hex(3)
        pair = cls(f"eps-{a}-{tag}", f"eps-{b}-{tag}", f"ev{a[:3]}{tag}", f"ev{b[:3]}{tag}",
                   f"{subnet}.1", f"{subnet}.2")
        made: list[str] = []
        try:
            for ns in (pair.a, pair.b):
                _ip("netns", "add", ns)
                made.append(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
            # Created inside namespace a, the peer moved to b: nothing lands in the main one.
            _ip("-n", pair.a, "link", "add", pair.a_dev, "type", "veth", "peer", "name",
                pair.b_dev, "netns", pair.b)
            for ns, dev, ip in ((pair.a, pair.a_dev, pair.a_ip), (pair.b, pair.b_dev, pair.b_ip)):
                _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
        except BaseException:
            for ns in made:
                with contextlib.suppress(RuntimeError, OSError):
                    _ip("netns", "delete", ns)
            raise
        return pair

    def argv(self, ns: str, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run inside namespace ``ns`` (``ip netns exec`` execs it: same PID)."""
        return ["ip", "netns", "exec", ns, *cmd]

    def popen(self, ns: str, cmd: Sequence[str], env: dict[str, str], log: Path | None = None,
              *, pipes: bool = False) -> subprocess.Popen[bytes]:
        """Start ``cmd`` in ``ns`` in its own session, output appended to ``log`` (or, with
        ``pipes``, stdin and stdout as pipes and stderr to ``log``)."""
        out = open(log, "ab") if log is not None else None  # noqa: SIM115 - the child owns it
        try:
            if pipes:
                proc = subprocess.Popen(self.argv(ns, cmd), env=env, start_new_session=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=out)
            else:
                proc = subprocess.Popen(self.argv(ns, cmd), env=env, start_new_session=True,
                                        stdout=out, stderr=subprocess.STDOUT)
        finally:
            if out is not None:
                out.close()
        self.procs.append(proc)
        return proc

    def _set_link(self, up: bool) -> None:
        # Down at a's end: b's end loses its carrier, so what b sends is dropped silently and
        # a's processes keep their own address (the local route stays).
        _ip("-n", self.a, "link", "set", self.a_dev, "up" if up else "down")

    def cut(self) -> None:
        self._set_link(False)

    def heal(self) -> None:
        self._set_link(True)

    def stop(self, procs: Sequence[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
        """SIGTERM ``procs`` (each by process group), SIGKILL what remains after ``grace``."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            live = [p for p in procs if p.poll() is None]
            for proc in live:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
            if live:
                with contextlib.suppress(AssertionError):
                    wait_for(lambda ps=live: all(p.poll() is not None for p in ps), wait,
                             what="processes to exit")

    def delete(self) -> None:
        """End our processes, then delete both namespaces (the veth pair goes with them)."""
        self.stop(self.procs)
        errors = []
        for ns in (self.a, self.b):
            try:
                _ip("netns", "delete", ns)
            except RuntimeError as exc:
                errors.append(str(exc))
        if errors:
            raise RuntimeError("; ".join(errors))
