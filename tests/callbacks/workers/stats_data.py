"""Sizes and data of `stats_worker.py`, in a module without absl flags so
that the test can import them (two modules defining `--out_dir` in one
pytest run clash)."""

import numpy as np

ROWS, DIM, IDS_PER_SAMPLE = 20, 4, 3
SAMPLES, GLOBAL_BATCH, EPOCHS, EVERY = 32, 8, 2, 2


def make_data():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, ROWS, (SAMPLES, IDS_PER_SAMPLE)).astype(np.int64)
    return ids, rng.normal(size=(SAMPLES, 1)).astype(np.float32)
