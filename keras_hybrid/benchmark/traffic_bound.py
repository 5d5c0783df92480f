"""The traffic model's lower bound for one worker and step.

From `DESIGN.md` ("Traffic model"): per worker and step, a dense variable
of D bytes costs 2 (N - 1) / N D over a ring all-reduce, and a sparse
table with rows of r bytes costs at least 2 u r, where u is the number of
unique ids the worker's slice of the batch looks up in it (pull the rows,
push their gradients). The bound is the same for every mode, since it is
a property of the workload and the data, not of how they are synchronized.
"""

import numpy as np

from keras_hybrid.benchmark import workloads
from keras_hybrid.strategy import input_sharding


def ring_all_reduce_bytes(num_bytes: int, num_workers: int) -> float:
    """Bytes one worker sends for a ring all-reduce of `num_bytes`."""
    return 2 * (num_workers - 1) / num_workers * num_bytes


def unique_ids_per_step(
    name: str, config, rank: int, num_workers: int, first_step: int
) -> dict[str, np.ndarray]:
    """Unique ids of each table in worker `rank`'s slice of each step.

    Args:
        name: String. Workload name.
        config: `WorkloadConfig`.
        rank: Int. The worker.
        num_workers: Int. Workers in the job.
        first_step: Int. Steps before this one are not counted (warm-up).

    Returns:
        Dict of table layer name to an int array, one entry per step.
    """
    global_batch = config.batch_per_worker * num_workers
    x, _ = workloads.make_arrays(name, config, config.steps * global_batch)
    sizes = input_sharding.split_sizes(global_batch, num_workers)
    start = sum(sizes[:rank])
    out = {}
    for table, (_, _, features) in workloads.table_features(
        name, config
    ).items():
        counts = []
        for step in range(first_step, config.steps):
            lo = step * global_batch + start
            ids = [x[f][lo : lo + sizes[rank]].ravel() for f in features]
            counts.append(np.unique(np.concatenate(ids)).size)
        out[table] = np.asarray(counts)
    return out


def lower_bound_bytes(
    name: str, config, model, rank: int, num_workers: int, first_step: int
) -> float:
    """Mean over measured steps of worker `rank`'s lower bound in bytes.

    Args:
        name: String. Workload name.
        config: `WorkloadConfig`.
        model: The workload's `keras.Model` (for the dense variables).
        rank: Int. The worker.
        num_workers: Int. Workers in the job.
        first_step: Int. First measured step (after the warm-up).

    Returns:
        Float. `2 (N - 1) / N D + sum over tables of 2 u r`, averaged.
    """
    tables = workloads.table_features(name, config)
    table_paths = {
        v.path for t in tables for v in model.get_layer(t).trainable_weights
    }
    dense = sum(
        int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
        for v in model.trainable_variables
        if v.path not in table_paths
    )
    unique = unique_ids_per_step(name, config, rank, num_workers, first_step)
    sparse = sum(
        2 * unique[table].mean() * dim * 4
        for table, (_, dim, _) in tables.items()
    )
    return float(ring_all_reduce_bytes(dense, num_workers) + sparse)
