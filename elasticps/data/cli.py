"""``elasticps data convert|synth|inspect``: make and look at chunked datasets."""

from __future__ import annotations

import argparse
import json
from typing import Any

from elasticps.data.cli_convert import register as register_convert
from elasticps.data.criteo_schema import CONVERT_DENSE_NORM, DEFAULT_ID_SPACE, DENSE_NORMS
from elasticps.data.write_defaults import (
    COMPRESSIONS,
    DEFAULT_CHUNKS_PER_FILE,
    DEFAULT_COMPRESSION,
    DEFAULT_ROWS_PER_CHUNK,
)
from elasticps.errors import ConfigError

DATA_EPILOG = """\
Examples:
  elasticps data synth ctr --rows 1000000 --test-rows 100000 --seed 1 --out /data/ctr
      a synthetic CTR dataset whose best achievable AUC is in its manifest
  elasticps data convert criteo train.txt --out /data/criteo
      the Criteo Kaggle text release -> chunked Parquet
  elasticps data convert csv data.csv --infer > schema.yaml
      a schema guessed from the first rows, to review
  elasticps data convert csv data.csv --schema schema.yaml --out /data/mine
      your own table with its declared schema -> chunked Parquet
  elasticps data convert text corpus.txt --ngram 3 --out /data/words
      plain text -> N-gram rows for a word model, with vocab.txt
  elasticps data inspect /data/ctr
      rows, chunks, label rate, missing rates, best AUC
  elasticps data convert csv hour.csv --schema schema.yaml \
      --out /data/clicks/dt=2026-12-01/hour=13
      one partition of a stream (its manifest, written last, commits it)
  elasticps data stream-end /data/clicks
      the stream is over: a job training it ends once all of it is trained
"""


UPLOAD_EPILOG = """\
examples:
  elasticps data upload /data/ctr s3://ml-bucket/datasets -n team-ml
      copies to s3://ml-bucket/datasets/team-ml/ctr; then `data: s3://ml-bucket/datasets/team-ml/ctr`
      in the job spec (and PADDLE_DATA_SCHEMES covers s3 by itself)
  elasticps data upload /data/ctr /mnt/nfs/datasets
      a shared filesystem every node mounts
  elasticps data upload /data/ctr pvc://datasets -n team-ml
      into the PersistentVolumeClaim `datasets` of namespace team-ml, at team-ml/ctr in it,
      through a short-lived transfer Job; then `data: pvc://datasets/team-ml/ctr`
"""

RECEIVE_EPILOG = """\
examples:
  elasticps data receive --dir /mnt/claim/team-ml/ctr --token-file /etc/elasticps-transfer/token
      what the transfer Job of `elasticps data upload DIR pvc://CLAIM` runs in its pod
"""


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def _add_output_options(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--out", required=required, metavar="DIR",
                        help="output dataset directory (a local path or any fsspec URL)")
    parser.add_argument("--rows-per-chunk", type=_positive, default=DEFAULT_ROWS_PER_CHUNK,
                        metavar="N", help="rows per chunk (Parquet row group); the master hands "
                        f"out chunks as tasks (default {DEFAULT_ROWS_PER_CHUNK})")
    parser.add_argument("--chunks-per-file", type=_positive, default=DEFAULT_CHUNKS_PER_FILE,
                        metavar="N", help="chunks per Parquet file before a new file starts "
                        f"(default {DEFAULT_CHUNKS_PER_FILE})")
    parser.add_argument("--compression", choices=COMPRESSIONS, default=DEFAULT_COMPRESSION,
                        help=f"Parquet compression (default {DEFAULT_COMPRESSION})")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the dataset already in --out")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress line even on a terminal")


def register(subparsers: Any) -> None:
    data = subparsers.add_parser(
        "data", help="make and inspect chunked datasets (your tables, text, Criteo, synthetic)",
        description="Make chunked Parquet datasets and look at them.",
        epilog=DATA_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)

    convert = actions.add_parser("convert", help="convert text data to a dataset")
    kinds = convert.add_subparsers(dest="convert_kind", metavar="FORMAT", required=True)
    criteo = kinds.add_parser(
        "criteo", help="Criteo display-ads text (TSV, or CSV with a header)",
        description="Convert Criteo display-ads text to a chunked Parquet dataset whose schema "
        "is the Criteo preset (label; I1..I13 dense int32; C1..C26 categorical hex32, hashed "
        "into one table). Each line is label, I1..I13 (integers, may be empty or negative), "
        "C1..C26 (8 hex digits, may be empty), tab separated; comma-separated files with a "
        "header line also work. Inputs may be compressed (.gz, .bz2, .xz). Malformed lines are "
        "reported with their line numbers and skipped; more than --max-bad-rows of them fail "
        "the run.",
    )
    criteo.add_argument("inputs", nargs="+", metavar="INPUT", help="input files or fsspec URLs")
    _add_output_options(criteo)
    criteo.add_argument("--max-bad-rows", type=_non_negative, default=0, metavar="K",
                        help="skip up to K malformed lines; one more fails the run (default 0)")
    criteo.add_argument("--dense-norm", choices=DENSE_NORMS, default=CONVERT_DENSE_NORM,
                        help="the normalisation of I1..I13 the dataset declares (default "
                        f"{CONVERT_DENSE_NORM}: log(1 + x), missing -1; see docs/data.md)")
    criteo.add_argument("--id-space", type=_positive, default=DEFAULT_ID_SPACE, metavar="N",
                        help=f"hashed ids of the C1..C26 table (default {DEFAULT_ID_SPACE:,})")
    criteo.set_defaults(func=run_convert_criteo)
    register_convert(kinds, _add_output_options, _non_negative, _positive)

    synth = actions.add_parser("synth", help="generate a synthetic dataset")
    synth_kinds = synth.add_subparsers(dest="synth_kind", metavar="KIND", required=True)
    ctr = synth_kinds.add_parser(
        "ctr", help="CTR rows from a planted model with a known best AUC",
        description="Generate rows with the Criteo schema from a planted logistic model over "
        "hashed feature weights and feature crosses. The AUC of the true probabilities (the "
        "best any model can do) is stored in the manifest as best_auc.",
    )
    ctr.add_argument("--rows", type=_positive, required=True, metavar="N", help="rows to write")
    ctr.add_argument("--seed", type=int, required=True, help="seed: same seed, same data")
    ctr.add_argument("--test-rows", type=_non_negative, default=0, metavar="M",
                     help="also write M held-out rows from the same model to DIR/test")
    ctr.add_argument("--label-rate", type=float, default=0.25,
                     help="target fraction of positive labels (default 0.25)")
    ctr.add_argument("--signal", type=float, default=None,
                     help="strength of the planted model; higher = higher best AUC "
                     "(default 0.7, best AUC near 0.80)")
    ctr.add_argument("--max-vocab", type=_positive, default=100_000,
                     help="cap on distinct values per categorical slot (default 100000)")
    _add_output_options(ctr)
    ctr.set_defaults(func=run_synth_ctr)

    inspect = actions.add_parser(
        "inspect", help="summarise a dataset",
        description="Print rows, chunks, label rate, per-column missing rates and the planted "
        "best AUC (synthetic data) of a dataset.",
    )
    inspect.add_argument("dataset", metavar="DIR", help="dataset directory or fsspec URL")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.set_defaults(func=run_inspect)

    stream_end = actions.add_parser(
        "stream-end", help="mark a stream as ended (writes PREFIX/_END)",
        description="Write the end marker PREFIX/_END of the stream under PREFIX (any fsspec "
        "URL): a job training the stream appends the partitions committed by then and ends "
        "once they are trained. Writing it again keeps the first marker. See docs/data.md.")
    stream_end.add_argument("prefix", metavar="PREFIX", help="the stream's prefix")
    stream_end.set_defaults(func=run_stream_end)

    upload = actions.add_parser(
        "upload", help="copy a dataset directory to storage a cluster job reads (resumable)",
        description="Copy LOCAL_DIR to URL/NAMESPACE/NAME (any fsspec URL: s3://, gs://, a "
        "shared filesystem path; or pvc://CLAIM[/PATH], a PersistentVolumeClaim of the "
        "namespace, written by a transfer Job that receives the files through the API "
        "server's pod proxy). Every file is read back and checked against its sha256 "
        "before it takes its name, so a rerun after an interruption skips what is already "
        "there; a file there with other content is refused unless --overwrite. Prints the "
        "URL to put in the job spec's data: field.",
        epilog=UPLOAD_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    upload.add_argument("local_dir", metavar="LOCAL_DIR", help="the dataset directory")
    upload.add_argument("url", metavar="URL",
                        help="storage root, e.g. s3://bucket/datasets or /mnt/shared/datasets")
    upload.add_argument("-n", "--namespace", default=None,
                        help="namespace of the jobs that will read it (default: "
                             "$USER_NAMESPACE or 'default')")
    upload.add_argument("--name", default=None,
                        help="dataset name under the namespace (default: LOCAL_DIR's name)")
    upload.add_argument("--overwrite", action="store_true",
                        help="replace files at the destination whose content differs")
    claim = upload.add_argument_group("pvc:// only (the transfer Job)")
    claim.add_argument("--kubeconfig", metavar="FILE",
                       help="kubeconfig to use (default: $KUBECONFIG or ~/.kube/config)")
    claim.add_argument("--context", help="kubeconfig context (default: its current context)")
    claim.add_argument("--image", default=None,
                       help="image of the transfer Job (default: elasticps's own image)")
    claim.add_argument("--ready-timeout", type=_positive, default=300, metavar="SECONDS",
                       help="how long to wait for the transfer pod to be ready (default 300)")
    upload.set_defaults(func=run_upload)

    receive = actions.add_parser(
        "receive", help="receive an upload into a directory (the transfer Job's server)",
        description="Serve plain HTTP on --port for `elasticps data upload DIR pvc://...`, "
        "which reaches it through the API server's pod proxy: files are written under a "
        "temporary name, checked against their sha256 and renamed; requests need the token "
        "in --token-file; paths out of --dir are refused. Exits 0 when the upload is over, "
        "1 after --idle-timeout seconds without a request.",
        epilog=RECEIVE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    receive.add_argument("--dir", required=True, metavar="DIR", help="where the files go")
    receive.add_argument("--token-file", required=True, metavar="FILE",
                         help="file holding the per-transfer token (mounted from a Secret)")
    receive.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    receive.add_argument("--port", type=_non_negative, default=None, metavar="PORT",
                         help="port to bind (default 8080; 0: the kernel picks, printed)")
    receive.add_argument("--max-bytes", type=_positive, default=None, metavar="N",
                         help="largest file accepted (default 64 GiB)")
    receive.add_argument("--idle-timeout", type=_positive, default=3600, metavar="SECONDS",
                         help="stop after this long without a request (default 3600)")
    receive.set_defaults(func=run_receive)


def run_upload(args: argparse.Namespace) -> int:
    from elasticps.config import user_namespace
    from elasticps.data.upload import upload

    def report(path: str, copied: bool) -> None:
        print(f"{'copied' if copied else 'already there'}: {path}", flush=True)

    if args.url.startswith("pvc://"):
        # The cluster layer (above this one) puts its transfer-Job upload on the `data`
        # parser as `upload_to_claim` (elasticps/cluster/cli.py).
        upload_to_claim = getattr(args, "upload_to_claim", None)
        if upload_to_claim is None:
            raise ConfigError(f"{args.url}: uploads into a PersistentVolumeClaim need the "
                              "cluster commands, which this `elasticps` was built without")
        return int(upload_to_claim(args, report))
    result = upload(args.local_dir, args.url, namespace=args.namespace or user_namespace(),
                    name=args.name, overwrite=args.overwrite, on_file=report)
    print(f"uploaded {args.local_dir} to {result.url}: {len(result.copied)} file(s) copied "
          f"({result.bytes_copied:,} bytes), {len(result.skipped)} already there, all "
          "verified by sha256")
    print(f"job spec: data: {result.url}")
    return 0


def run_receive(args: argparse.Namespace) -> int:
    from pathlib import Path

    from elasticps.data.receive import (
        DEFAULT_MAX_BYTES,
        RECEIVER_PORT,
        Receiver,
        read_token,
        serve,
    )

    receiver = Receiver(Path(args.dir), read_token(args.token_file),
                        args.max_bytes or DEFAULT_MAX_BYTES)
    return serve(receiver, args.host, RECEIVER_PORT if args.port is None else args.port,
                 idle_timeout=args.idle_timeout)


def _progress(args: argparse.Namespace) -> bool | None:
    return False if args.no_progress else None


def run_convert_criteo(args: argparse.Namespace) -> int:
    from elasticps.data.criteo_convert import convert_criteo

    report = convert_criteo(
        args.inputs, args.out, id_space=args.id_space, dense_norm=args.dense_norm,
        rows_per_chunk=args.rows_per_chunk,
        chunks_per_file=args.chunks_per_file, max_bad_rows=args.max_bad_rows,
        compression=args.compression, overwrite=args.overwrite, progress=_progress(args),
    )
    assert report.manifest is not None  # the malformed lines were logged as warnings
    print(f"wrote {report.rows:,} rows in {len(report.manifest.chunks)} chunks to {args.out} "
          f"({report.bad_rows} malformed, {report.blank_lines} blank line(s) skipped)")
    return 0


def run_synth_ctr(args: argparse.Namespace) -> int:
    from elasticps.data.synth import DEFAULT_SIGNAL, synth_ctr

    report = synth_ctr(
        args.out, args.rows, args.seed, test_rows=args.test_rows,
        rows_per_chunk=args.rows_per_chunk, chunks_per_file=args.chunks_per_file,
        label_rate=args.label_rate,
        signal=DEFAULT_SIGNAL if args.signal is None else args.signal,
        max_vocab=args.max_vocab, compression=args.compression, overwrite=args.overwrite,
        progress=_progress(args),
    )
    m = report.manifest
    print(f"wrote {m.num_rows:,} rows in {len(m.chunks)} chunks to {args.out}; "
          f"label rate {m.label_rate:.4f}, best AUC {m.best_auc:.4f}")
    if report.test_manifest is not None:
        t = report.test_manifest
        print(f"wrote {t.num_rows:,} test rows to {args.out.rstrip('/')}/test; "
              f"best AUC {t.best_auc:.4f}")
    return 0


def run_stream_end(args: argparse.Namespace) -> int:
    from elasticps.data.stream import write_end_marker

    print(f"wrote the end marker {write_end_marker(args.prefix)}")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from elasticps.data.dataset import open_dataset
    from elasticps.data.summary import format_summary, summary

    info = summary(open_dataset(args.dataset))
    print(json.dumps(info, indent=1) if args.json else format_summary(info))
    return 0
