"""The one "finite gradient" decision: a push with NaN or Inf anywhere is dropped whole.

The trainer decides it before it steps its own copy of the parameters (geo mode, its own dense
update), the parameter client before it sends, and the pservers again on what arrives; one
function, so the sides cannot disagree on which batches count.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["finite"]


def finite(dense: Mapping[str, np.ndarray],
           sparse: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> bool:
    """No NaN or Inf in any dense gradient (or delta) nor in any sparse table's rows."""
    return all(np.isfinite(g).all() for g in dense.values()) and all(
        np.isfinite(rows).all() for _, rows in sparse.values())
