"""``elasticps checkpoint inspect URL``: what a checkpoint holds and whether its checksum holds."""

from __future__ import annotations

import datetime
import hashlib
from typing import Any

import fsspec
import numpy as np

from elasticps.errors import CheckpointError
from elasticps.proto import pserver_pb2
from elasticps.pserver import sparse_policy
from elasticps.pserver.checkpoint import format as fmt
from elasticps.pserver.checkpoint.delta import chain
from elasticps.pserver.checkpoint.manifest import MAX_MANIFEST_BYTES, Manifest, data_name
from elasticps.pserver.checkpoint.snapshot import ShardSnapshot, SparseState
from elasticps.pserver.sparse_table import COUNTED
from elasticps.safe_files import read_regular


def _manifest_paths(fs: Any, path: str) -> list[str]:
    """Manifests at ``path``: the file itself, a shard directory's, or every shard's below it."""
    if path.endswith(".json"):
        return [path]
    if path.endswith(".safetensors"):
        sibling = path[: -len(".safetensors")] + ".json"
        return [sibling] if fs.exists(sibling) else []
    found = fs.glob(f"{path.rstrip('/')}/ckpt-*.json") + fs.glob(
        f"{path.rstrip('/')}/shard-*-of-*/ckpt-*.json")
    return sorted(found)


def inspect_checkpoint(manifest_path: str, fs: Any) -> dict[str, Any]:
    """A JSON-able report of one checkpoint, including whether its checksum holds."""
    report: dict[str, Any] = {"manifest": manifest_path}
    manifest = Manifest.from_json(_read_manifest(fs, manifest_path))
    directory = manifest_path.rsplit("/", 1)[0]
    data_path = f"{directory}/{data_name(manifest.id, manifest.writer)}"  # checked names only
    report.update(id=manifest.id, shard=manifest.shard, num_shards=manifest.num_shards,
                  data=data_path, size=manifest.size, sha256=manifest.sha256,
                  created=datetime.datetime.fromtimestamp(manifest.created_unix,
                                                          datetime.UTC).isoformat(),
                  parent=manifest.parent, chain=_chain(fs, manifest_path))
    try:
        data = read_regular(fs, data_path, manifest.size)  # never more than it says
    except FileNotFoundError:
        report.update(checksum_ok=False, problem=f"{data_path} is missing")
        return report
    except OSError as exc:  # a FIFO or a link in the file's place, or more than it says
        report.update(checksum_ok=False, problem=f"cannot read {data_path}: {exc.strerror}")
        return report
    digest = hashlib.sha256(data).hexdigest()
    report["checksum_ok"] = len(data) == manifest.size and digest == manifest.sha256
    if not report["checksum_ok"]:
        report["problem"] = f"{len(data)} bytes with sha256 {digest}: truncated or corrupt"
        return report
    try:
        metadata, tensors = fmt.parse(bytes(data))
        snap = fmt.to_snapshot(metadata, tensors)
    except CheckpointError as exc:
        report.update(checksum_ok=False, problem=f"checksum holds but the content does not: "
                                                 f"{exc}")
        return report
    report.update(format=metadata["format"], version=metadata["version"],
                  initialized=metadata["initialized"], counters=metadata["counters"])
    report["applied_batches"] = len(snap.applied)
    report["applied_tasks"] = len(list(snap.applied.tasks()))
    report["earlier_layouts"] = [layout.num_shards for layout in snap.legacy]
    tables = []
    for spec in snap.specs:
        entry: dict[str, Any] = {
            "name": spec.name,
            "kind": pserver_pb2.TableSpec.Kind.Name(spec.kind).lower(),
            "optimizer": pserver_pb2.OptimizerSpec.Kind.Name(spec.optimizer.kind).lower(),
            "lr": spec.optimizer.lr,
        }
        if spec.kind == pserver_pb2.TableSpec.DENSE:
            entry.update(shape=list(spec.shape), slice=int(snap.dense[spec.name].values.size),
                         step=snap.dense[spec.name].step,
                         bytes=_bytes(tensors, f"dense.{spec.name}."))
        else:
            entry.update(dim=spec.dim, id_space=spec.id_space or "unbounded",
                         rows=int(snap.sparse[spec.name].ids.size),
                         bytes=_bytes(tensors, f"sparse.{spec.name}."),
                         **{what: snap.counters.get(f"sparse.{spec.name}.{what}")
                            for what in COUNTED})
            if snap.delta:
                entry["tombstones"] = int(snap.tombstones.get(spec.name, np.zeros(0)).size)
            if spec.policy.evict == pserver_pb2.SparsePolicy.SCORE:
                entry["score"] = _score_summary(spec.policy, snap.sparse[spec.name], snap)
        tables.append(entry)
    report["tables"] = tables
    return report


def _score_summary(policy: pserver_pb2.SparsePolicy, state: SparseState,
                   snap: ShardSnapshot) -> dict[str, Any]:
    """A SCORE table's settings and its rows' show/click counts, decayed to the newest pass
    the checkpoint applied (the rows it holds: in a delta, the changed ones)."""
    passes = [p for p, _, _, _ in snap.applied.tasks()]
    now = max(passes) if passes else 0
    summary: dict[str, Any] = {
        "decay": policy.score_decay, "delete_threshold": policy.delete_threshold,
        "nonclk_coeff": policy.nonclk_coeff, "click_coeff": policy.click_coeff, "pass": now}
    scores = state.bookkeeping.scores if state.bookkeeping is not None else None
    if scores is None:
        return summary  # written before scores were kept
    shows = sparse_policy.decayed(policy, scores.shows, scores.score_pass, now)
    clicks = sparse_policy.decayed(policy, scores.clicks, scores.score_pass, now)
    below = sparse_policy.show_click_score(policy, shows, clicks) < policy.delete_threshold
    summary.update(shows=round(float(shows.sum()), 3), clicks=round(float(clicks.sum()), 3),
                   below_threshold=int(np.count_nonzero(below)))
    return summary


def _bytes(tensors: dict[str, np.ndarray], prefix: str) -> int:
    """Bytes a table's tensors take in the file."""
    return int(sum(a.nbytes for name, a in tensors.items() if name.startswith(prefix)))


def _chain(fs: Any, manifest_path: str) -> list[str] | str:
    """The ids of the checkpoint's chain, base first, from the manifests beside it; or why the
    chain is broken (a restore would skip this checkpoint)."""
    directory = manifest_path.rsplit("/", 1)[0]
    published = []
    for path in sorted(fs.glob(f"{directory}/ckpt-*.json")):
        try:
            published.append(Manifest.from_json(_read_manifest(fs, path)))
        except CheckpointError:
            continue  # reported on its own line
    newest = Manifest.from_json(_read_manifest(fs, manifest_path))
    try:
        return [m.id for m in chain(newest, published)]
    except CheckpointError as exc:
        return f"broken: {exc}"


def _read_manifest(fs: Any, path: str) -> bytes:
    try:
        return read_regular(fs, path, MAX_MANIFEST_BYTES)
    except OSError as exc:
        raise CheckpointError(f"cannot read the manifest {path}: {exc.strerror or exc}"
                              ) from exc


def inspect_url(url: str) -> list[dict[str, Any]]:
    fs, path = fsspec.core.url_to_fs(url)
    paths = _manifest_paths(fs, path)
    if not paths:
        raise CheckpointError(f"no checkpoint manifest (ckpt-*.json) found at {url}")
    reports = []
    for manifest_path in paths:
        try:
            reports.append(inspect_checkpoint(manifest_path, fs))
        except CheckpointError as exc:  # one bad manifest is reported, not fatal
            reports.append({"manifest": manifest_path, "id": "?", "shard": "?",
                            "num_shards": "?", "created": "?", "data": "?", "size": 0,
                            "sha256": "?", "checksum_ok": False, "problem": str(exc)})
    return reports


def format_report(report: dict[str, Any]) -> str:
    ok = "ok" if report.get("checksum_ok") else "BAD"
    lines = [
        f"checkpoint {report['id']}  shard {report['shard']} of {report['num_shards']}  "
        f"created {report['created']}",
        f"  data     {report['data']} ({report['size']} bytes)",
        f"  sha256   {report['sha256']}  checksum {ok}",
    ]
    if not report.get("checksum_ok"):
        lines.append(f"  problem  {report.get('problem', '')}")
        return "\n".join(lines)
    if report.get("parent"):
        lines.append(f"  delta    of checkpoint {report['parent']}: sparse tables hold the rows "
                     "pushed since it, and the ids evicted since (tombstones)")
    links = report.get("chain")
    if isinstance(links, list) and len(links) > 1:
        lines.append(f"  chain    {' <- '.join(links)} (base first; a restore applies them in "
                     "order)")
    elif isinstance(links, str):
        lines.append(f"  chain    {links}")
    lines.append(f"  format   {report['format']} v{report['version']}  initialised "
                 f"{report['initialized']}  applied batches {report['applied_batches']} "
                 f"in {report['applied_tasks']} tasks")
    if report.get("earlier_layouts"):
        lines.append(f"  resharded from layouts of {report['earlier_layouts']} shards; it "
                     "remembers what their shards had applied, for batches cut by a resharding")
    for t in report["tables"]:
        if t["kind"] == "dense":
            what = (f"shape {t['shape']}, slice of {t['slice']} values, step {t['step']}, "
                    f"{t['bytes']} bytes")
        else:
            what = f"dim {t['dim']}, id space {t['id_space']}, {t['rows']} rows"
            if "tombstones" in t:
                what += f" changed, {t['tombstones']} evicted since the parent"
            what += f", {t['bytes']} bytes"
            if t.get("admitted") is not None:  # older checkpoints did not keep the counters
                what += (f"; since the shard began: {t['admitted']} admitted, {t['evicted']} "
                         f"evicted, {t['dropped']} gradients dropped")
            score = t.get("score")
            if score is not None:
                what += (f"; score eviction (decay {score['decay']}, delete below "
                         f"{score['delete_threshold']}, coefficients {score['nonclk_coeff']} / "
                         f"{score['click_coeff']})")
                if "shows" in score:
                    what += (f": {score['shows']} shows, {score['clicks']} clicks as of pass "
                             f"{score['pass']}, {score['below_threshold']} rows below the "
                             "threshold")
        lines.append(f"  table    {t['name']}: {t['kind']} {what}; {t['optimizer']} lr={t['lr']}")
    return "\n".join(lines)
