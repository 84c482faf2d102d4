"""``elasticps code pack|unpack``: the user's code directory as ``submit`` ships it.

``pack`` shows what a job's ``code: DIR`` would carry (files, size, hash) and can write the
archive; ``unpack`` is what the trainers' init container runs (it checks the hash first).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from elasticps.cluster.code_archive import DEFAULT_CODE_LIMIT

CODE_EPILOG = """\
examples:
  elasticps code pack examples/ctr
      list the files `code: examples/ctr` would ship, with the archive's size and sha256
  elasticps code unpack /opt/elasticps/code-archive/code.tar.gz /workspace/code --sha256 HEX
      what a trainer pod's init container runs (code shipped in a ConfigMap)
  elasticps code fetch s3://bucket/code/HEX.tar.gz --sha256 HEX --into /workspace/code
      what it runs with `code_url:` in the spec: fetch, check the hash, unpack
"""


def register(subparsers: Any) -> None:
    code = subparsers.add_parser(
        "code", help="pack a code directory as `submit` ships it, or unpack it",
        description="A job spec's `code: DIR` is packed into a deterministic archive (sorted "
                    "files, fixed times; caches, .git and virtual environments left out, and "
                    "files that may hold credentials: .env, .aws/, .ssh/, *.pem, *.key, ... "
                    "unless the spec's code_include names them), "
                    "sent in a ConfigMap named after its sha256 (or, with `code_url: URL`, "
                    "uploaded to URL/<sha256>.tar.gz), and unpacked into /workspace/code in "
                    "every trainer pod.",
        epilog=CODE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = code.add_subparsers(dest="action", metavar="ACTION", required=True)
    pack = actions.add_parser("pack", help="show (or write) the archive of a code directory")
    pack.add_argument("directory", metavar="DIR")
    pack.add_argument("--out", metavar="FILE", help="also write the archive to FILE")
    pack.add_argument("--include", action="append", default=[], metavar="PATTERN",
                      help="ship a file left out as a credential (.env, .aws/credentials, "
                      "*.pem, ...) whose path or name matches PATTERN; repeatable (the spec's "
                      "code_include)")
    pack.set_defaults(func=run_pack)
    unpack = actions.add_parser("unpack", help="check an archive's hash and unpack it")
    unpack.add_argument("archive", metavar="ARCHIVE")
    unpack.add_argument("destination", metavar="DIR")
    unpack.add_argument("--sha256", required=True, metavar="HEX",
                        help="the hash the archive must have (from the pod spec)")
    unpack.set_defaults(func=run_unpack)
    fetch = actions.add_parser(
        "fetch", help="fetch an archive from a storage URL, check its hash and unpack it")
    fetch.add_argument("url", metavar="URL", help="the archive (any fsspec URL)")
    fetch.add_argument("--sha256", required=True, metavar="HEX",
                       help="the hash the archive must have (from the pod spec)")
    fetch.add_argument("--into", required=True, metavar="DIR", help="where to unpack it")
    fetch.add_argument("--limit", type=_bytes, default=DEFAULT_CODE_LIMIT, metavar="BYTES",
                       help="refuse an archive, or contents, bigger than this (default "
                            f"{DEFAULT_CODE_LIMIT:,}: the spec's default code_limit)")
    fetch.set_defaults(func=run_fetch)


def _bytes(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return value


def run_pack(args: argparse.Namespace) -> int:
    from elasticps.cluster.code_archive import pack_code

    archive = pack_code(args.directory, include=args.include)
    for name in archive.files:
        print(name)
    print(f"{len(archive.files)} files, {archive.unpacked_bytes:,} bytes, packed to "
          f"{len(archive.data):,} bytes; sha256 {archive.sha256}")
    note = archive.left_out_note()
    if note:
        print(note)
    if args.out:
        Path(args.out).write_bytes(archive.data)
    return 0


def run_unpack(args: argparse.Namespace) -> int:
    from elasticps.cluster.code_archive import unpack_code

    count = unpack_code(args.archive, args.destination, args.sha256)
    print(f"unpacked {count} files into {args.destination}")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from elasticps.cluster.code_archive import CodeLimits
    from elasticps.cluster.code_store import fetch_code

    limits = CodeLimits(args.limit, args.limit, f"the limit of {args.limit:,} bytes (--limit)",
                        "raise code_limit in the job spec")
    count = fetch_code(args.url, args.sha256, args.into, limits)
    print(f"fetched {args.url} and unpacked {count} files into {args.into}")
    return 0
