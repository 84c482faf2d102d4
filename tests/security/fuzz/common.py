"""What every fuzz test shares: a time-bounded hypothesis profile and JSON-ish strategies.

Each fuzz test feeds a parser inputs it was not written for and asserts that only the parser's
own domain error comes out (never a KeyError, a TypeError, a RecursionError...). The profile
keeps each test to seconds: a fixed number of examples, no example database (CI starts clean
anyway), no per-example deadline (a loaded CI machine is slow, not wrong).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=250, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])
SLOW_FUZZ = settings(FUZZ, max_examples=60)  # for targets that write files per example

# Scalars JSON can hold, including the ones that trip naive parsers: huge ints, NaN/Infinity
# (Python's json reads them), odd strings.
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", "..", "../../etc/passwd", "/etc/passwd", "http://x/y", "0", "-1",
                     "1e999", "NaN", "\x00", "a/../b", "C:\\x"]),
)
json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                               max_size=4),
    max_leaves=12,
)


def with_fields(base: dict[str, Any], names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """``base`` (a valid document) with some of ``names`` replaced by arbitrary JSON values,
    some dropped, and perhaps an unknown field added: inputs near the valid ones, where
    parsers' type checks matter."""
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        doc = dict(base)
        for name in draw(st.lists(st.sampled_from(names), max_size=4, unique=True)):
            if draw(st.booleans()):
                doc[name] = draw(json_values)
            else:
                doc.pop(name, None)
        if draw(st.booleans()):
            doc[draw(st.text(max_size=8))] = draw(json_values)
        return doc

    return build()
