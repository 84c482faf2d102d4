"""Read another process's metrics: fetch its ``/metrics`` and parse it with prometheus_client's
own parser (the master reads the pservers' this way for its status page)."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]

# A role's exposition is tens of KiB; the URL comes from the store, so the read is bounded.
MAX_EXPOSITION_BYTES = 4 << 20


def parse(text: str) -> Samples:
    """Sample name (``elasticps_pserver_pushes_total``) -> [(labels, value)]."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def scrape(url: str, timeout: float = 1.0) -> Samples | None:
    """The samples at ``url``, or None when it does not answer in time or is not metrics."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read(MAX_EXPOSITION_BYTES + 1)
        if len(body) > MAX_EXPOSITION_BYTES:
            return None
        return parse(body.decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def total(samples: Mapping[str, list[tuple[dict[str, str], float]]], name: str,
          **labels: str | tuple[str, ...]) -> float | None:
    """The sum of the samples named ``name`` whose labels match ``labels`` (a value, or a
    tuple of values any of which matches; labels not named may be anything), None if there
    is none."""
    values = [value for have, value in samples.get(name, [])
              if all(have.get(k) in (v if isinstance(v, tuple) else (v,))
                     for k, v in labels.items())]
    return sum(values) if values else None
