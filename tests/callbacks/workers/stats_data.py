"""Sizes and data of `stats_scenarios.py`, shared with its test (which
imports them without the strategy's code)."""

import numpy as np

ROWS, DIM, IDS_PER_SAMPLE = 20, 4, 3
SAMPLES, GLOBAL_BATCH, EPOCHS, EVERY = 32, 8, 2, 2


def make_data():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, ROWS, (SAMPLES, IDS_PER_SAMPLE)).astype(np.int64)
    return ids, rng.normal(size=(SAMPLES, 1)).astype(np.float32)
