"""The status page's files: ``index.html``, ``app.js`` (draws everything, charts included, from
``api/status``; no library, nothing fetched from elsewhere) and ``style.css``.

Every URL in them is relative, so the page works wherever it is mounted: at ``/`` of the
master or of ``elasticps ui``, and behind the Kubernetes API server's service proxy
(``.../services/<job>-master:http/proxy/``)."""

from __future__ import annotations

from importlib import resources

_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}


def asset(path: str) -> tuple[bytes, str] | None:
    """(body, content type) of the page file served at ``path``, or None."""
    entry = _FILES.get(path)
    if entry is None:
        return None
    name, kind = entry
    return resources.files(__name__).joinpath(name).read_bytes(), kind
