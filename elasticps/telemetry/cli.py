"""``elasticps monitoring export DIR``: the Grafana dashboard, the Prometheus rules and the
PodMonitor a job ships with, written where a person wants them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  elasticps monitoring export ./monitoring
  kubectl apply -n team-ml -f ./monitoring/podmonitor.yml
  promtool check rules ./monitoring/*-rules.yml
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "monitoring", help="export the Grafana dashboard, Prometheus rules and PodMonitor",
        description="The monitoring elasticps ships: a Grafana dashboard, Prometheus recording "
                    "and alert rules, and a PodMonitor (docs/observability.md).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    export = verbs.add_parser("export", help="write the files into a directory",
                              description="Write the monitoring files into DIR (made if "
                                          "missing).")
    export.add_argument("directory", metavar="DIR", type=Path)
    export.add_argument("--overwrite", action="store_true",
                        help="replace files already there with other content")
    export.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from elasticps.telemetry.monitoring_files import FILES, export

    for path in export(args.directory, overwrite=args.overwrite):
        print(f"{path}  {FILES[path.name]}")
    return 0
