"""Criteo display-ads text -> a dataset that declares the Criteo preset, by the one converter.

Input lines are ``label, I1..I13, C1..C26``, tab separated (the Kaggle / 1TB release), or comma
separated. The first line of each input decides: it holds a tab -> tab separated, else commas;
it names the columns (``label``, ``I1``.., ``C1``..; case does not matter, the order is free,
extra columns such as ``Id`` are ignored) -> it is a header. Inputs may be any fsspec URL and may
be compressed (``.gz``, ``.bz2``, ``.xz``, ``.zst`` by extension).

All this module knows is that layout: each input becomes a
:class:`~elasticps.data.source_text.TextSource` whose columns it names (quotes are plain
characters: Criteo fields hold none), and :func:`elasticps.data.convert.convert` types and checks
the rows as :func:`~elasticps.data.criteo_schema.criteo_preset` declares them, by the rules every
converter shares. So a line is malformed when it has the wrong number of fields, an empty label
or one other than 0/1, an integer that is not an int32 (surrounding spaces, a ``+`` sign and
integral floats such as ``260.0`` are accepted), a categorical that is not 8 hex digits, or bytes
that are not UTF-8; malformed lines are skipped, counted and reported as ``input:line:column:
reason`` (``input:line: reason`` for a wrong field count), and past ``max_bad_rows`` the
conversion fails and deletes what it wrote. Empty lines are skipped and counted. The id space
and the dense normalisation are chosen here and declared in the dataset's schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import fsspec

from elasticps.data.bad_rows import BadRows
from elasticps.data.convert import ConvertReport, WriteOptions, convert
from elasticps.data.criteo_schema import (
    CONVERT_DENSE_NORM,
    DEFAULT_ID_SPACE,
    FEATURE_COLUMNS,
    criteo_preset,
)
from elasticps.data.source_text import EXTRA_PREFIX, TextSource
from elasticps.data.sources import read_first_line
from elasticps.data.write_defaults import (
    DEFAULT_CHUNKS_PER_FILE,
    DEFAULT_COMPRESSION,
    DEFAULT_ROWS_PER_CHUNK,
)
from elasticps.errors import DataError


@dataclass(frozen=True)
class TextLayout:
    """How one input file is laid out: separator, header, and its columns' names in file order
    (label, I1..I13, C1..C26 as the schema spells them; any other column as an extra one)."""

    delimiter: str
    header: bool
    names: tuple[str, ...]


def sniff_layout(first_line: str, where: str) -> TextLayout:
    """Decide separator and header from the first line of an input."""
    line = first_line.rstrip("\r\n")
    if "\t" in line:
        delimiter = "\t"
    elif "," in line:
        delimiter = ","
    else:
        raise DataError(f"{where}: the first line has neither tabs nor commas: {line[:80]!r}")
    fields = [name.strip() for name in line.split(delimiter)]
    lowered = [name.lower() for name in fields]
    if "i1" not in lowered and "c1" not in lowered:
        return TextLayout(delimiter, False, FEATURE_COLUMNS)
    missing = [name for name in FEATURE_COLUMNS if name.lower() not in lowered]
    if missing:
        raise DataError(
            f"{where}: the header line lacks column(s) {', '.join(missing)}; it has {fields}"
        )
    # The first field of each name is that column; every other field (a repeated or an unknown
    # name, an empty one) is an extra column, which the conversion ignores.
    names = [f"{EXTRA_PREFIX}{i + 1}" for i in range(len(fields))]
    for name in FEATURE_COLUMNS:
        names[lowered.index(name.lower())] = name
    return TextLayout(delimiter, True, tuple(names))


def criteo_source(url: str, bad: BadRows) -> TextSource:
    """One Criteo text input, as a source of the preset's columns."""
    layout = sniff_layout(read_first_line(url), url)
    return TextSource(url, delimiter=layout.delimiter, header=layout.header,
                      order=FEATURE_COLUMNS, bad=bad, names=layout.names, quoting=False)


def convert_criteo(
    inputs: Sequence[str],
    out_url: str,
    *,
    id_space: int = DEFAULT_ID_SPACE,
    dense_norm: str = CONVERT_DENSE_NORM,
    rows_per_chunk: int = DEFAULT_ROWS_PER_CHUNK,
    chunks_per_file: int = DEFAULT_CHUNKS_PER_FILE,
    max_bad_rows: int = 0,
    compression: str = DEFAULT_COMPRESSION,
    overwrite: bool = False,
    progress: bool | None = None,
) -> ConvertReport:
    """Convert Criteo text files (fsspec URLs) into a dataset at ``out_url`` whose schema is
    ``criteo_preset(id_space, dense_norm)``.

    Raises :class:`MalformedInputError` (with ``bad_lines``) when more than ``max_bad_rows``
    lines are malformed; then nothing is left behind in ``out_url``.
    """
    if not inputs:
        raise DataError("no input files given")
    schema = criteo_preset(id_space, dense_norm)  # a ConfigError names a bad option first
    for url in inputs:
        fs, path = fsspec.core.url_to_fs(url)
        if not fs.isfile(path):
            raise DataError(f"input {url!r} does not exist or is not a file")
    bad = BadRows(max_bad_rows)
    sources = [criteo_source(url, bad) for url in inputs]
    return convert(
        sources, schema, out_url,
        options=WriteOptions(rows_per_chunk, chunks_per_file, compression, overwrite),
        max_bad_rows=max_bad_rows, ignore_extra=True, source_info={"kind": "criteo"},
        progress=progress, total_bytes=_total_size(inputs), bad=bad)


def _total_size(inputs: Sequence[str]) -> int | None:
    """Total bytes when no input is compressed (so bytes read map to progress), else None."""
    total = 0
    for url in inputs:
        if fsspec.utils.infer_compression(url) is not None:
            return None
        fs, path = fsspec.core.url_to_fs(url)
        total += int(fs.size(path) or 0)
    return total
