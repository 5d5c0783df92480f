"""Data of the smoke test, importable without defining absl flags."""

import numpy as np

ROWS = 64
BATCH = 16  # global; 8 rows per worker


def make_data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, ROWS, size=(n, 3)).astype("int32")
    # A target the table can learn: the mean id, scaled.
    y = (ids.mean(axis=1, keepdims=True) / ROWS).astype("float32")
    return ids, y
