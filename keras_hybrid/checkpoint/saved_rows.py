"""Rows of a saved table, regrouped for the partition that restores them.

A table saved by N shards is N files, each holding the rows its shard
owned in local order. Restoring on M workers (or into one whole variable)
needs, for every target row, the file and the position it sits at; both
follow from the saved `RowPartition`, which depends on the row count only.
Files are memory-mapped, so a worker reads just the rows it will own.
"""

import numpy as np

from keras_hybrid.sharding.row_partition import RowPartition


def rows_for_ids(
    ids: np.ndarray, saved: RowPartition, read_shard
) -> np.ndarray:
    """Gathers saved rows of global `ids`, in the order of `ids`.

    Args:
        ids: Int64 array of global row ids.
        saved: The `RowPartition` the checkpoint was written with.
        read_shard: Callable `shard -> array` returning the saved rows of a
            shard (in its local order), e.g. a memory-mapped file.

    Returns:
        An array of `len(ids)` rows.
    """
    owner = saved.shard_of(ids)
    local = saved.local_index(ids)
    result = None
    for shard in range(saved.num_shards):
        picked = np.nonzero(owner == shard)[0]
        if picked.size == 0:
            continue
        rows = read_shard(shard)
        if result is None:
            result = np.empty((len(ids), *rows.shape[1:]), rows.dtype)
        result[picked] = rows[local[picked]]
    if result is None:  # no ids
        rows = read_shard(0)
        result = np.empty((0, *rows.shape[1:]), rows.dtype)
    return result


def full_table(saved: RowPartition, read_shard) -> np.ndarray:
    """The whole saved table, in global id order."""
    full = None
    for shard in range(saved.num_shards):
        rows = read_shard(shard)
        if full is None:
            full = np.empty((saved.num_rows, *rows.shape[1:]), rows.dtype)
        full[saved.ids_on_shard(shard)] = rows
    return full
