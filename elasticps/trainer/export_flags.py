"""The command-line flags of an export schedule, for a training script's own parser.

::

    parser = argparse.ArgumentParser()
    add_export_flags(parser)
    args = parser.parse_args()
    schedule = schedule_from_flags(args, meta={"model": "dnn"}, root=workdir)  # None: no flag

Every script that exports while it trains takes the same flags with the same defaults:
``--export-dir DIR`` turns exporting on; the ``--export-every-*`` flags say when a version is due
(any of them, whichever comes first; with none, every :data:`DEFAULT_EVERY_S` seconds);
``--export-full-every`` and ``--export-keep`` shape the chains on disk.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from elasticps.errors import ConfigError
from elasticps.trainer.export_schedule import UNITS, ExportSchedule

DEFAULT_EVERY_S = 30.0
DEFAULT_FULL_EVERY = 10
DEFAULT_KEEP = 2

GROUP_DESCRIPTION = """\
With --export-dir the job writes versions of its model into DIR while it trains, for
`elasticps serve DIR`: each version a delta of the one before (the rows that changed), a full
export every --export-full-every deltas, old chains deleted once --export-keep newer ones are
complete. A version is due when any --export-every-* count is reached, or every
%(every)g seconds when none is given; one more is written when training ends. DIR/LATEST names
the newest complete version; a reader never sees one half written."""


def add_export_flags(parser: argparse.ArgumentParser) -> None:
    """The ``--export-*`` flags, in a group of their own in ``--help``."""
    group = parser.add_argument_group(
        "exporting while training", GROUP_DESCRIPTION % {"every": DEFAULT_EVERY_S})
    group.add_argument("--export-dir", metavar="DIR", default=None,
                       help="the model directory to export versions into (relative: to the "
                            "job's workdir)")
    group.add_argument("--export-every-s", metavar="S", type=float, default=None,
                       help=f"a version every S seconds (default {DEFAULT_EVERY_S:g} when no "
                            "other --export-every-* is given)")
    for unit in UNITS:
        whose = {"passes": "passes of the job", "tasks": "tasks this trainer finished",
                 "batches": "batches this trainer trained",
                 "partitions": "partitions of a stream the job trained through (every "
                               "task of them finished)"}[unit]
        group.add_argument(f"--export-every-{unit}", metavar="N", type=int, default=None,
                           help=f"a version every N {whose}")
    group.add_argument("--export-full-every", metavar="K", type=int, default=DEFAULT_FULL_EVERY,
                       help="a full export after K deltas (default %(default)s)")
    group.add_argument("--export-keep", metavar="CHAINS", type=int, default=DEFAULT_KEEP,
                       help="chains (a full export and its deltas) kept on disk "
                            "(default %(default)s)")


def schedule_from_flags(args: argparse.Namespace, *, meta: Mapping[str, Any] | None = None,
                        root: str | Path | None = None,
                        default: Mapping[str, int] | None = None) -> ExportSchedule | None:
    """The schedule the flags describe (None without ``--export-dir``); a relative directory
    lies under ``root``. With no ``--export-every-*`` flag, ``default`` (``{unit: N}``, a
    script's own: a stream's every partition, say) or every :data:`DEFAULT_EVERY_S` seconds.
    A bad value is a :class:`ConfigError` naming its flag."""
    if args.export_dir is None:
        return None
    counts = {f"every_{unit}": getattr(args, f"export_every_{unit}") for unit in UNITS}
    every_s = args.export_every_s
    if every_s is None and all(count is None for count in counts.values()):
        if default:
            unknown = sorted(set(default) - set(UNITS))
            if unknown:
                raise ValueError(f"default units {unknown} are not among {UNITS}")
            counts.update({f"every_{unit}": n for unit, n in default.items()})
        else:
            every_s = DEFAULT_EVERY_S
    directory = Path(args.export_dir)
    if root is not None and not directory.is_absolute():
        directory = Path(root) / directory
    try:
        return ExportSchedule(directory, every_s=every_s, full_every=args.export_full_every,
                              keep=args.export_keep, meta=dict(meta or {}), **counts)
    except ConfigError as exc:
        # "ExportSchedule every_tasks=0 ..." -> "--export-every-tasks=0 ..."
        message = str(exc).replace("ExportSchedule ", "")
        for name in ("every_s", "full_every", "keep", *counts):
            message = message.replace(f"{name}=", f"--export-{name.replace('_', '-')}=")
        raise ConfigError(message) from exc
