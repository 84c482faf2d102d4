"""The monitoring a job ships with: a Grafana dashboard, Prometheus recording and alert rules,
and a PodMonitor (``telemetry/monitoring/``, package data; the repository's
``deploy/monitoring/`` is the same folder). :func:`export` copies them where a person wants
them (``elasticps monitoring export DIR``); docs/observability.md says how to load each.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from elasticps.errors import ConfigError

# name -> what it is (the order `export` lists them in)
FILES: dict[str, str] = {
    "grafana-dashboard.json": "Grafana dashboard (import it; pick the Prometheus data source)",
    "recording-rules.yml": "Prometheus recording rules",
    "alert-rules.yml": "Prometheus alert rules",
    "podmonitor.yml": "PodMonitor for the Prometheus Operator (kubectl apply -n NAMESPACE)",
}


def read(name: str) -> str:
    """The text of one of :data:`FILES`."""
    if name not in FILES:
        raise ConfigError(f"{name!r} is not one of the monitoring files ({', '.join(FILES)})")
    return resources.files("elasticps.telemetry").joinpath("monitoring", name).read_text("utf-8")


def export(directory: Path, *, overwrite: bool = False) -> list[Path]:
    """Write every file into ``directory`` (made if missing); returns their paths.

    A file already there with other content is kept unless ``overwrite``: nothing is written
    then, and the error names it (it may hold a person's edits).
    """
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory} exists and is not a directory")
    texts = {directory / name: read(name) for name in FILES}
    changed = [path for path, text in texts.items()
               if path.exists() and path.read_text("utf-8") != text]
    if changed and not overwrite:
        raise ConfigError(f"{', '.join(map(str, changed))} already exist(s) with other content; "
                          "pass --overwrite to replace them")
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in texts.items():
        path.write_text(text, "utf-8")
    return list(texts)
