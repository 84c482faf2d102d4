"""``elasticps serve MODEL_DIR``: score rows over HTTP with the newest version of a model."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from elasticps.errors import ConfigError
from elasticps.private_files import check_owned, check_parents

log = logging.getLogger(__name__)

DESCRIPTION = """\
Answer scoring requests over HTTP with the newest version of MODEL_DIR, a model directory a
training job writes while it trains (--export-dir; a LATEST pointer and numbered versions).
The server polls LATEST, loads each new version off the request path (only the deltas after
the one it holds) and swaps it in without failing a request; every answer names the version
it used.

  POST /score    {"rows": [{column: value, ...}, ...]} -> {"version": V, "scores": [...]}
                 rows in the training dataset's own column names and raw values
  GET /healthz   200 once a version is loaded, 503 before
  GET /version   the loaded version, its training position and timestamps (freshness)
  GET /metrics   Prometheus metrics

--model names the code that rebuilds the PyTorch module from an export, a function
build(tensors, manifest) -> torch.nn.Module (examples/tabular/score.py:model_from_export is
one); the model directory only ever provides tensors and JSON. The server listens on
127.0.0.1 unless --host says otherwise and checks no credentials: put it behind what
authenticates your clients before you open it to a network. Stops on SIGTERM or Ctrl-C.
"""

EPILOG = """\
example:
  elasticps serve /models/shop --model examples/tabular/score.py:model_from_export --port 8500
  curl -s localhost:8500/score -d '{"rows": [{"age": 34, "country": "country-03"}]}'
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve", help="score rows over HTTP with the newest version of a model directory",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", metavar="MODEL_DIR", type=Path,
                        help="the model directory (a training script's --export-dir); it "
                             "may not exist yet: /healthz answers 503 until a first version "
                             "is there")
    parser.add_argument("--model", required=True, metavar="FILE.py:FUNCTION",
                        help="the function that builds the module from an export (also "
                             "MODULE:FUNCTION)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8500,
                        help="port to listen on (0: any free port; the URL is printed)")
    parser.add_argument("--poll", type=float, default=1.0, metavar="SECONDS",
                        help="how often LATEST is read for a new version")
    parser.add_argument("--max-rows", type=int, default=1024,
                        help="rows one request may hold")
    parser.add_argument("--max-body-bytes", type=int, default=1 << 20,
                        help="bytes one request body may hold")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="threads each request's forward pass may use (requests run in "
                             "parallel threads already)")
    parser.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    for name in ("poll", "max_rows", "max_body_bytes", "torch_threads"):
        if getattr(args, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be > 0, got "
                              f"{getattr(args, name)}")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not a port (0 to 65535)")
    if args.model_dir.exists() and not args.model_dir.is_dir():
        raise ConfigError(f"MODEL_DIR {args.model_dir} is not a directory")
    # What it serves is what its writer put there: nobody else may be able to change it.
    check_owned(args.model_dir, "MODEL_DIR")
    check_parents(args.model_dir, "MODEL_DIR")
    import torch

    from elasticps.serve.builder import load_builder
    from elasticps.serve.follower import ModelFollower
    from elasticps.serve.metrics import ServeMetrics
    from elasticps.serve.server import ScoringServer

    torch.set_num_threads(args.torch_threads)
    build = load_builder(args.model)
    follower: ModelFollower | None = None
    metrics = ServeMetrics(lambda: follower.current if follower is not None else None)
    follower = ModelFollower(args.model_dir, build, poll_s=args.poll, metrics=metrics)
    server = ScoringServer(follower, metrics, args.host, args.port, max_body=args.max_body_bytes,
                           max_rows=args.max_rows)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    follower.start()
    server.start()
    print(f"elasticps serve: {args.model_dir} on {server.url}", flush=True)
    log.info("Serving %s on %s (POST /score, GET /healthz, /version, /metrics).",
             args.model_dir, server.url)
    if not _loopback(args.host):
        log.warning("elasticps serve listens on %s, beyond this machine, and checks no "
                    "credentials: anyone who reaches the port can score; put it behind what "
                    "authenticates your clients.", args.host)
    try:
        stop.wait()
    finally:
        server.close()
        follower.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("Stopped serving %s.", args.model_dir)
    return 0


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve beyond the machine
