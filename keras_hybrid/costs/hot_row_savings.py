"""Hot rows: what replicating a table's top rows saves.

Ids follow a Zipf law over a table's rows, `p(k) ~ 1 / (k + 1)**s` (the
benchmark's `workloads.zipf_ids`: id `k` is the k-th most frequent). The
`h` hot rows are ids `0 .. h - 1`. A batch of `n` lookups holds on
average `sum_k 1 - (1 - p_k)**n` unique ids; the hot ones among them are
served locally, so the share of a call's unique ids that still travel is

    cold_fraction = E[unique cold ids] / E[unique ids],

which `traffic` applies to the profile's (measured, Heaps-law) unique ids.
`shard_load` draws real batches and maps them with the package's
`RowPartition` to get the rows each shard serves per step.
"""

import functools

import numpy as np

from keras_hybrid.sharding.row_partition import RowPartition


@functools.lru_cache(maxsize=64)
def _probabilities(rows: int, zipf: float) -> np.ndarray:
    p = 1.0 / np.arange(1, rows + 1, dtype=np.float64) ** zipf
    p /= p.sum()
    p.setflags(write=False)
    return p


def _expected_unique(p: np.ndarray, lookups: float) -> float:
    """`sum 1 - (1 - p)**n`: expected distinct ids of n draws."""
    return float(-np.expm1(lookups * np.log1p(-np.minimum(p, 1 - 1e-16))).sum())


def cold_fraction(rows: int, zipf: float, lookups: float, hot: int) -> float:
    """Share of a batch's expected unique ids that are not hot rows.

    Args:
        rows: Int. Rows of the table.
        zipf: Float. Exponent of the id frequencies.
        lookups: Float. Ids looked up by the batch (duplicates included).
        hot: Int. Hot rows (ids `0 .. hot - 1`).
    """
    if hot <= 0 or lookups <= 0:
        return 1.0
    if hot >= rows:
        return 0.0
    p = _probabilities(int(rows), float(zipf))
    total = _expected_unique(p, lookups)
    return _expected_unique(p[hot:], lookups) / total if total else 1.0


def shard_load(
    rows: int,
    zipf: float,
    lookups: int,
    workers: int,
    hot: int = 0,
    draws: int = 8,
    seed: int = 0,
) -> dict:
    """Rows each shard serves per step to other workers, from drawn ids.

    Every worker draws `lookups` Zipf ids, dedupes them (as
    `sparse.lookup` does), drops the hot ones (served by its own replica)
    and asks each id's owner (`RowPartition.create(rows, workers)`) for
    the rest; a shard does not serve itself.

    Returns:
        Dict: `max_over_mean` (the most loaded shard's rows over the mean,
        averaged over draws), `mean_rows` (rows a shard serves per step),
        `max_rows`.
    """
    if workers < 2:
        raise ValueError(f"`workers` must be >= 2. Received: {workers}")
    p = _probabilities(int(rows), float(zipf))
    partition = RowPartition.create(int(rows), int(workers))
    rng = np.random.default_rng(seed)
    ratios, means, peaks = [], [], []
    for _ in range(draws):
        served = np.zeros(workers, np.int64)
        for w in range(workers):
            ids = np.unique(rng.choice(rows, size=lookups, p=p))
            ids = ids[ids >= hot]
            owner = partition.shard_of(ids)
            served += np.bincount(owner[owner != w], minlength=workers)
        means.append(served.mean())
        peaks.append(served.max())
        ratios.append(served.max() / served.mean() if served.mean() else 1.0)
    return {
        "max_over_mean": float(np.mean(ratios)),
        "mean_rows": float(np.mean(means)),
        "max_rows": float(np.mean(peaks)),
    }
