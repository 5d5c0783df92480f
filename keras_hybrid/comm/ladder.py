"""The capacity ladder in NumPy: the sizes a variable-sized exchange pads
to (`capacity` is its graph side), priced by the cost library with no
TensorFlow op and no TensorFlow import.

Counts up to 32 are exact; above that the ladder has 16 steps per power of
two, so padding is less than 1/16 of the payload. Counts must be below
2**30.
"""

import numpy as np

_EXACT = 32
_STEPS = 16
# Buckets of counts below 2**30: 0..32 exact, then exponents 1..25 of 16
# steps (the last bucket is 2**30 itself).
NUM_BUCKETS = _EXACT + 1 + _STEPS * 25


def _ladder() -> np.ndarray:
    """Capacity of every bucket, ascending: `i` up to 32, then mantissas
    17..32 shifted left by exponents 1..25."""
    rel = np.arange(NUM_BUCKETS - _EXACT - 1, dtype=np.int64)
    scaled = (rel % _STEPS + 17) << (rel // _STEPS + 1)
    return np.concatenate([np.arange(_EXACT + 1, dtype=np.int64), scaled])


CAPACITIES = _ladder()


def capacities_of(counts, pairwise: bool = False) -> np.ndarray:
    """`capacity_for` (with `pairwise`, `pair_capacity_for`) of an array of
    counts, in NumPy: what cost models price, with no TF op per call.

    Args:
        counts: Array-like of ints below 2**30.
        pairwise: Bool. Whether each count is a pairwise block's (never
            fewer than one row). Defaults to `False`.

    Returns:
        An int64 array of `counts`'s shape.
    """
    counts = np.asarray(counts, np.int64)
    cap = CAPACITIES[np.searchsorted(CAPACITIES, counts, side="left")]
    return np.maximum(cap, 1) if pairwise else cap
