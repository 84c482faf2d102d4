"""Independent, slow, obviously-right reference implementations for the data tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

COLUMNS = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]


def parse_line(line: str, sep: str = "\t") -> dict[str, int | None]:
    """One Criteo text line -> {column: value}, the plain Python way."""
    fields = line.rstrip("\n").split(sep)
    assert len(fields) == 40, fields
    row: dict[str, int | None] = {"label": int(fields[0])}
    for i in range(1, 14):
        row[f"I{i}"] = int(fields[i]) if fields[i] else None
    for i in range(1, 27):
        text = fields[13 + i]
        row[f"C{i}"] = int(text, 16) if text else None
    return row


def parse_file(path: Path, sep: str = "\t") -> list[dict[str, int | None]]:
    return [parse_line(line, sep) for line in path.read_text().splitlines() if line]


def brute_force_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Count all (positive, negative) pairs: wins + ties / 2."""
    pos = scores[labels == 1][:, None].astype(np.float64)
    neg = scores[labels == 0][None, :].astype(np.float64)
    wins = np.count_nonzero(pos > neg)
    ties = np.count_nonzero(pos == neg)
    return (wins + 0.5 * ties) / (pos.size * neg.size)
