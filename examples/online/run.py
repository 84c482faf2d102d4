"""The online example in one command: a stream lands, a job follows it, serve follows the job.

    python examples/online/run.py --workdir /tmp/online [--partitions 12] [--every 5]

Starts, each as its own process:

1. ``make_stream.py --out WORKDIR/clicks``: a partition every ``--every`` seconds, then ``_END``;
2. ``elasticps run ... train.py --stream WORKDIR/clicks --export-dir models`` (the job's workdir
   ``WORKDIR/job``): it tests each partition, trains on it, and writes a version of the model
   into ``WORKDIR/job/models`` each partition;
3. ``elasticps serve WORKDIR/job/models --model score.py:build``, following those versions;
4. ``client.py``, scoring against the server until a version trained through the stream's last
   partition answers.

When the job and the client are done it stops the server and prints what the job measured
(``summary.json``: progressive AUC per partition beside the planted model's, freshness from
commit to publication) and what the client saw (freshness from commit to a served answer), and
writes them all to ``WORKDIR/online.json``. The status page (its URL is in ``WORKDIR/job.log``)
charts the progressive AUC while it runs. Exits 0 when every part did.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True, help="where the stream, the job and the models go")
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--every", type=float, default=5.0, help="seconds between two partitions")
    p.add_argument("--rows", type=int, default=20_000, help="impressions per partition")
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--pservers", type=int, default=2)
    p.add_argument("--port", type=int, default=0, help="elasticps serve's (0: any free one)")
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this long")
    p.add_argument("--train-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for train.py (repeat it)")
    return p.parse_args(argv)


def start(argv: list[str], log: Path, **kwargs: Any) -> subprocess.Popen[str]:
    out: IO[str] = log.open("w")
    return subprocess.Popen(argv, stdout=kwargs.pop("stdout", out), stderr=out, text=True,
                            **kwargs)


def serve_url(server: subprocess.Popen[str]) -> str:
    """The URL ``elasticps serve`` prints on its first line."""
    assert server.stdout is not None
    line = server.stdout.readline()
    found = re.search(r"on (http://\S+)$", line.strip())
    if found is None:
        raise SystemExit(f"elasticps serve did not start: {line!r}")
    return found.group(1)


# Called once the server is up, with its URL and the workdir, while the rest runs (a
# benchmark's load); what it returns is called when the job and the client are done.
During = Callable[[str, Path], Callable[[], None]]


def run(args: argparse.Namespace, during: During | None = None) -> dict[str, Any]:
    workdir = Path(args.workdir)
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, mode=0o700)
    stream, job_dir = workdir / "clicks", workdir / "job"
    models = job_dir / "models"
    python, bin_dir = sys.executable, Path(sys.executable).parent
    elasticps = str(bin_dir / "elasticps") if (bin_dir / "elasticps").exists() else "elasticps"
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        procs["serve"] = start([elasticps, "serve", str(models), "--port", str(args.port),
                                "--poll", "0.2", "--model", f"{HERE / 'score.py'}:build"],
                               workdir / "serve.log", stdout=subprocess.PIPE)
        url = serve_url(procs["serve"])
        procs["stream"] = start([python, str(HERE / "make_stream.py"), "--out", str(stream),
                                 "--partitions", str(args.partitions), "--every",
                                 str(args.every), "--rows", str(args.rows)],
                                workdir / "make_stream.log")
        procs["job"] = start([elasticps, "run", "--trainers", str(args.trainers), "--pservers",
                              str(args.pservers), "--workdir", str(job_dir),
                              str(HERE / "train.py"), "--stream", str(stream),
                              "--export-dir", "models", *args.train_arg], workdir / "job.log")
        procs["client"] = start([python, str(HERE / "client.py"), "--url", url, "--stream",
                                 str(stream), "--timeout", str(args.timeout), "--json",
                                 str(workdir / "client.json")], workdir / "client.log")
        done = during(url, workdir) if during is not None else None
        deadline = time.monotonic() + args.timeout
        codes = {name: procs[name].wait(timeout=max(1.0, deadline - time.monotonic()))
                 for name in ("stream", "job", "client")}
        if done is not None:
            done()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
    return report(workdir, codes)


def report(workdir: Path, codes: dict[str, int]) -> dict[str, Any]:
    summary = json.loads((workdir / "job" / "summary.json").read_text())
    planted = json.loads((workdir / "clicks" / "_planted.json").read_text())
    client_path = workdir / "client.json"
    client = json.loads(client_path.read_text()) if client_path.exists() else {}
    return {
        "exit_codes": codes,
        "partitions": [{"partition": name, "progressive_auc": auc,
                        "planted_auc": planted.get(name)}
                       for name, auc in zip(summary.get("partitions", []),
                                            summary.get("progressive_auc", []), strict=True)],
        "freshness_published_s": summary.get("freshness_s"),
        "freshness_served_s": client.get("freshness_served_s"),
        "newest_served": client.get("newest_served"),
        "wall_s": summary.get("wall_s"),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    (Path(args.workdir) / "online.json").write_text(json.dumps(result, indent=1) + "\n")
    for row in result["partitions"]:
        auc, best = row["progressive_auc"], row["planted_auc"]
        print(f"{row['partition']}: progressive AUC "
              f"{'-' if auc is None else f'{auc:.4f}'} (planted model {best:.4f})")
    print(f"freshness, commit to published version: {result['freshness_published_s']}")
    print(f"freshness, commit to a served answer:   {result['freshness_served_s']}")
    print(f"exit codes: {result['exit_codes']}")
    return 0 if not any(result["exit_codes"].values()) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
