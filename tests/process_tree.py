"""The launcher's role processes as the kernel lists them (``/proc``), for tests of the launcher
itself: which children it runs, of which role. (``elasticps chaos`` finds processes through the
job's store records instead: ``elasticps/chaos/targets.py``.)"""

from __future__ import annotations

ROLES = ("master", "pserver", "trainer")


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def _role_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as handle:
            if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
    except OSError:
        return None
    for i, arg in enumerate(argv[:-1]):
        if arg == b"elasticps":
            # the first word after `elasticps` that is not an option (`-v`) is the command
            command = next((a.decode() for a in argv[i + 1:] if not a.startswith(b"-")), None)
            return command if command in ROLES else None
    return None


def live_roles(launcher_pid: int) -> dict[str, list[int]]:
    """The launcher's live role children by role (each leads its own session: direct
    children)."""
    roles: dict[str, list[int]] = {r: [] for r in ROLES}
    for child in _children(launcher_pid):
        role = _role_of(child)
        if role is not None:
            roles[role].append(child)
    return roles


def leader_pid(node: str | None, pids: list[int]) -> int | None:
    """The master process among ``pids`` whose node name (``master-<host>-<pid>``) leads."""
    if node is None:
        return None
    return next((pid for pid in pids if node.endswith(f"-{pid}")), None)
