"""Kubernetes resource quantities for CPU and memory, and durations in seconds, parsed strictly
and printed canonically.

CPU is kept in millicores, memory in bytes, so the job spec can divide a job-wide budget among
trainers exactly. Only the forms people write are accepted (``2``, ``0.5``, ``500m``;
``512Mi``, ``4Gi``, ``1G``, ``1073741824``); exponent forms like ``1e3`` are refused so that a
typo is not silently read as a tiny or huge number.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from elasticps.errors import shown

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_MEMORY = re.compile(r"^(?P<num>[0-9]+(?:\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?\Z")
_CPU = re.compile(r"^(?P<num>[0-9]+(?:\.[0-9]+)?)(?P<milli>m)?\Z")
_DURATION = re.compile(r"^(?P<num>[0-9]{1,9})(?P<unit>[smhd]?)\Z")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_cpu(value: object) -> int:
    """CPU cores (``2``, ``0.5``, ``"500m"``) -> millicores. Raises ValueError with a reason."""
    if isinstance(value, bool):
        raise ValueError("is a boolean, not a CPU count")
    if isinstance(value, int | float):
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise ValueError(f"must be a number of cores or a quantity like '500m', got {shown(value)}")
    match = _CPU.match(text) if len(text) <= 32 else None
    if match is None:
        raise ValueError(f"{shown(value)} is not a CPU quantity (use cores like 2 or 0.5, "
                         "or '500m')")
    number = Decimal(match["num"])
    millis = number if match["milli"] else number * 1000
    if millis != millis.to_integral_value():
        raise ValueError(f"{shown(value)} is finer than one millicore")
    if millis <= 0:
        raise ValueError(f"{shown(value)} must be more than zero")
    return int(millis)


def format_cpu(millis: int) -> str:
    """Millicores -> the shortest exact quantity (``2``, ``1500m``)."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def parse_memory(value: object) -> int:
    """A memory quantity (``"512Mi"``, ``"1G"``, bytes as an int) -> bytes."""
    if isinstance(value, bool):
        raise ValueError("is a boolean, not a memory size")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise ValueError(f"must be a quantity like '4Gi' or '512Mi', got {shown(value)}")
    match = _MEMORY.match(text) if len(text) <= 32 else None
    if match is None:
        raise ValueError(
            f"{shown(value)} is not a memory quantity (use a number with an optional suffix "
            "Ki, Mi, Gi, Ti or k, M, G, T, e.g. '4Gi')"
        )
    suffix = match["suffix"] or ""
    scale = _BINARY.get(suffix) or _DECIMAL.get(suffix) or 1
    try:
        amount = Decimal(match["num"]) * scale
    except InvalidOperation:  # pragma: no cover - the regex admits only plain decimals
        raise ValueError(f"{shown(value)} is not a number") from None
    if amount != amount.to_integral_value():
        raise ValueError(f"{shown(value)} is not a whole number of bytes")
    if amount <= 0:
        raise ValueError(f"{shown(value)} must be more than zero")
    return int(amount)


def format_memory(nbytes: int) -> str:
    """Bytes -> the largest exact suffix (binary first: ``4Gi``, ``1536Mi``, ``1G``)."""
    for table in (_BINARY, _DECIMAL):
        for suffix, scale in sorted(table.items(), key=lambda item: -item[1]):
            if nbytes % scale == 0:
                return f"{nbytes // scale}{suffix}"
    return str(nbytes)


def parse_duration(value: object) -> int:
    """Whole seconds (``3600``) or a number with a unit (``"90m"``, ``"12h"``, ``"7d"``) ->
    seconds. Raises ValueError with a reason."""
    if isinstance(value, bool):
        raise ValueError("is a boolean, not a duration")
    text = str(value).strip() if isinstance(value, int | str) else None
    match = _DURATION.match(text) if text is not None else None
    if match is None:
        raise ValueError(f"{value!r:.40} is not a duration (seconds, or a number with s, m, "
                         "h or d, e.g. '12h')")
    return int(match["num"]) * _SECONDS[match["unit"]]
