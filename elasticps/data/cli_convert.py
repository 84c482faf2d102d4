"""``elasticps data convert csv|tsv|parquet|jsonl|text``: users' files -> format-2 datasets."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from elasticps.data.write_defaults import DEFAULT_MIN_CHUNKS, SMALL_CHUNK_ROWS
from elasticps.errors import ConfigError

TABLE_FORMATS = ("csv", "tsv", "parquet", "jsonl")
_DESCRIPTION = {
    "csv": "comma-separated text (quoted fields allowed)",
    "tsv": "tab-separated text",
    "parquet": "Parquet files (typed columns; list columns for multi-valued features)",
    "jsonl": "JSON Lines: one JSON object per line (lists for multi-valued features)",
}
TOLERANCE = """\
Values are read as users' files have them: surrounding spaces are stripped; empty, NA and ?
(the schema's 'missing' tokens, per column overridable) are missing; integral floats such as
260.0 are accepted in integer columns. A binary label may be 0/1, true/false, yes/no, y/n or
t/f in any case; a class label (kind: class) takes any integers or strings as its classes. A
malformed row (a non-integral value in an integer
column, a non-number in a dense column, a bad label, a wrong number of fields) is reported as
file:line:column: reason; more than --max-bad-rows of them fail the run and nothing is written.
"""


def register(kinds: Any, add_output_options: Callable[..., None],
             non_negative: Callable[[str], int], positive: Callable[[str], int]) -> None:
    for kind in TABLE_FORMATS:
        parser = kinds.add_parser(
            kind, help=_DESCRIPTION[kind],
            description=f"Convert {_DESCRIPTION[kind]} with a declared schema (YAML) to a "
            "chunked Parquet dataset, streaming, computing dense statistics on the way. "
            "--infer prints a schema guess to review instead.",
            epilog=TOLERANCE, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("inputs", nargs="+", metavar="FILE", help="input files or URLs")
        parser.add_argument("--schema", metavar="S.yaml", help="the schema file (required "
                            "unless --infer)")
        parser.add_argument("--infer", action="store_true",
                            help="print a schema guessed from the first rows as YAML and exit "
                            "(writes nothing)")
        parser.add_argument("--label", metavar="COL",
                            help="with --infer: the label column (its kind, binary, float or "
                            "class, guessed from its values; default: a column named like a "
                            "label)")
        if kind in ("csv", "tsv"):
            parser.add_argument("--no-header", action="store_true",
                                help="the first line is data; the columns are, in order, the "
                                "schema's label(s), weight and columns")
        parser.add_argument("--ignore-extra", action="store_true",
                            help="skip input columns the schema does not name (else an error)")
        parser.add_argument("--like", metavar="DIR",
                            help="take dtypes and dense statistics from the dataset at DIR "
                            "(convert a test split like its training set)")
        parser.add_argument("--max-bad-rows", type=non_negative, default=0, metavar="K",
                            help="skip up to K malformed rows; one more fails the run "
                            "(default 0)")
        add_output_options(parser, required=False)
        parser.add_argument("--min-chunks", type=positive, default=DEFAULT_MIN_CHUNKS,
                            metavar="K", help="a dataset that fits in one chunk is split into up "
                            f"to K chunks of at least {SMALL_CHUNK_ROWS} rows, so that K trainers "
                            f"each get a task (default {DEFAULT_MIN_CHUNKS}; 1: one chunk)")
        parser.set_defaults(func=run_convert_table, convert_format=kind)

    text = kinds.add_parser(
        "text", help="plain text -> an N-gram dataset for a word model",
        description="Convert plain text (one sentence per line) to N-gram rows: N-1 context "
        "word ids (columns w1..w{N-1}, ids: passthrough into the table 'words') and the next "
        "word as a class label ('next'). The vocabulary (most frequent training words after "
        "<s>, <unk>, </s>) is written to vocab.txt beside the data; a seeded fraction of the "
        "sentences goes to the DIR/test split.")
    text.add_argument("inputs", nargs="+", metavar="FILE", help="text files or URLs")
    text.add_argument("--ngram", type=positive, required=True, metavar="N",
                      help="N of the N-gram: N-1 context words predict the next (N >= 2)")
    text.add_argument("--vocab-size", type=positive, default=10_000, metavar="V",
                      help="vocabulary size including <s>, <unk>, </s> (default 10000)")
    text.add_argument("--min-count", type=positive, default=1, metavar="C",
                      help="words seen fewer than C times are <unk> (default 1)")
    text.add_argument("--test-fraction", type=float, default=0.1, metavar="F",
                      help="fraction of sentences held out in DIR/test (default 0.1; 0: none)")
    text.add_argument("--seed", type=int, default=0, help="seed of the held-out choice")
    text.add_argument("--keep-case", action="store_true", help="do not lowercase words")
    text.add_argument("--dim", type=positive, default=32,
                      help="embedding width declared for the 'words' table (default 32)")
    add_output_options(text)
    text.set_defaults(func=run_convert_text)


def _sources(args: argparse.Namespace, order: tuple[str, ...], bad: Any) -> list[Any]:
    from elasticps.data.source_jsonl import JsonLinesSource
    from elasticps.data.source_parquet import ParquetSource
    from elasticps.data.source_text import TextSource

    kind = args.convert_format
    if kind in ("csv", "tsv"):
        return [TextSource(url, delimiter="," if kind == "csv" else "\t",
                           header=not args.no_header, order=order, bad=bad)
                for url in args.inputs]
    if kind == "jsonl":
        return [JsonLinesSource(url, bad=bad) for url in args.inputs]
    return [ParquetSource(url) for url in args.inputs]


def run_convert_table(args: argparse.Namespace) -> int:
    from elasticps.data.bad_rows import BadRows
    from elasticps.data.convert import WriteOptions, convert
    from elasticps.data.from_table import load_schema
    from elasticps.data.infer import infer_schema

    if args.infer:
        order = () if args.schema is None else load_schema(args.schema).source_columns()
        if getattr(args, "no_header", False) and not order:
            raise ConfigError("--infer --no-header needs --schema to name the columns")
        source = _sources(args, order, BadRows(max_bad_rows=1 << 62))[0]
        sys.stdout.write(infer_schema(source, label=args.label))
        return 0
    if args.label is not None:
        raise ConfigError("--label goes with --infer; a schema names its label (label: COL)")
    if args.schema is None or args.out is None:
        raise ConfigError("convert needs --schema S.yaml and --out DIR (or --infer to guess "
                          "a schema)")
    schema = load_schema(args.schema)
    bad = BadRows(args.max_bad_rows)
    report = convert(
        _sources(args, schema.source_columns(), bad), schema, args.out,
        options=WriteOptions(args.rows_per_chunk, args.chunks_per_file, args.compression,
                             args.overwrite, args.min_chunks),
        max_bad_rows=args.max_bad_rows, ignore_extra=args.ignore_extra, like=args.like,
        source_info={"kind": args.convert_format}, progress=False if args.no_progress else None,
        bad=bad)
    assert report.manifest is not None  # the malformed rows were logged as warnings
    print(f"wrote {report.rows:,} rows in {len(report.manifest.chunks)} chunks to {args.out} "
          f"({report.bad_rows} malformed row(s), {report.blank_lines} blank line(s) skipped)")
    return 0


def run_convert_text(args: argparse.Namespace) -> int:
    from elasticps.data.text_ngram import TextOptions, convert_text

    report = convert_text(
        args.inputs, args.out,
        TextOptions(ngram=args.ngram, vocab_size=args.vocab_size, min_count=args.min_count,
                    test_fraction=args.test_fraction, seed=args.seed,
                    keep_case=args.keep_case, dim=args.dim),
        rows_per_chunk=args.rows_per_chunk, chunks_per_file=args.chunks_per_file,
        compression=args.compression, overwrite=args.overwrite)
    test = report.test_manifest
    print(f"wrote {report.manifest.num_rows:,} {args.ngram}-gram rows to {args.out}"
          + (f" and {test.num_rows:,} to {args.out.rstrip('/')}/test" if test else "")
          + f"; vocabulary of {len(report.vocabulary):,} words in vocab.txt")
    return 0
