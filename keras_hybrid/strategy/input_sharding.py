"""Splits each global batch of a dataset among the workers."""

import weakref

import tensorflow as tf
from absl import logging

from keras_hybrid._compat import tf as tf_compat

_FILE = tf.data.experimental.AutoShardPolicy.FILE
_OFF = tf.data.experimental.AutoShardPolicy.OFF
# Datasets a strategy made for one worker (`shard_dataset`'s results, and
# `distribute_datasets_from_function`'s). They are not
# `tf.distribute.DistributedDataset`s, so Keras' `fit` hands them to
# `experimental_distribute_dataset` again, which must leave them as they are.
_per_worker = weakref.WeakSet()


def mark_per_worker(dataset):
    """Records that `dataset` already yields this worker's batches;
    returns it."""
    try:
        _per_worker.add(dataset)
    except TypeError:  # not a dataset (a user's `dataset_fn` may return any)
        pass
    return dataset


def _is_per_worker(dataset) -> bool:
    try:
        return dataset in _per_worker
    except TypeError:
        return False


def shard_dataset(
    dataset: tf.data.Dataset, rank: int, size: int
) -> tf.data.Dataset:
    """Returns this worker's part of a dataset of global batches (a
    dataset that is one worker's part already, as it is).

    - Default (`AUTO`/`DATA`): worker r keeps rows
      `[r * b // size, (r + 1) * b // size)` of every global batch of b
      rows, so all workers run the same number of steps and one global step
      sees exactly the global batch, in order. Every worker reads the whole
      input pipeline.
    - `FILE`: TensorFlow's file-level auto-sharding plus a rebatch to the
      per-worker batch size, as `MultiWorkerMirroredStrategy` does. Each
      worker reads only its files.
    - `OFF`, or a pipeline that reads through `shard(size, rank)` (a
      script written for Horovod): the dataset is used as given; the user
      sharded it.
    """
    if size == 1 or _is_per_worker(dataset):
        return dataset
    policy = dataset.options().experimental_distribute.auto_shard_policy
    if policy == _OFF:
        return dataset
    if sharded_by_worker(dataset, rank, size):
        logging.log_first_n(
            logging.INFO,
            "keras-hybrid: the dataset is sharded by worker "
            "(`shard(%d, %d)`): each worker's batches are used as given, "
            "as with auto_shard_policy OFF.",
            1,
            size,
            rank,
        )
        return dataset
    if policy == _FILE:
        return tf_compat.shard_files(dataset, rank, size)
    # `map` passes a plain tuple element's parts as arguments (not a
    # namedtuple's): its slice is returned whole (a one-tuple stays one),
    # anything else as its one part.
    whole = type(dataset.element_spec) is tuple
    return dataset.map(
        lambda *batch: _slice_batch(batch, rank, size, whole),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def sharded_by_worker(dataset, rank: int, size: int) -> bool:
    """Whether `dataset` reads through `shard(size, rank)`, as a script
    written for Horovod shards its pipeline: each worker's batches are its
    own already."""
    return (size, rank) in tf_compat.dataset_shards(dataset)


def sharded_into(dataset, counts) -> bool:
    """Whether `dataset` reads through a `shard(n, index)` with `n` one of
    `counts`, for any index (an elastic job's worker counts)."""
    return any(
        n in counts and 0 <= index < max(counts)
        for n, index in tf_compat.dataset_shards(dataset)
    )


def _slice_batch(batch: tuple, rank: int, size: int, whole: bool):
    flat = tf.nest.flatten(batch)
    rows = tf.shape(flat[0], out_type=tf.int64)[0]
    start = rank * rows // size
    stop = (rank + 1) * rows // size
    sliced = tf.nest.pack_sequence_as(batch, [t[start:stop] for t in flat])
    return sliced if whole else sliced[0]


def slice_rows(structure, rank: tf.Tensor, size: tf.Tensor):
    """Rows `[rank * b // size, (rank + 1) * b // size)` of every tensor in
    `structure` (a global batch of b rows); `rank` and `size` are int64
    tensors, read when the step runs."""
    flat = tf.nest.flatten(structure)
    tensors = [t for t in flat if isinstance(t, tf.Tensor) and t.shape.rank]
    if not tensors:
        return structure
    rows = tf.shape(tensors[0], out_type=tf.int64)[0]
    start = rank * rows // size
    stop = (rank + 1) * rows // size
    return tf.nest.pack_sequence_as(
        structure,
        [
            t[start:stop] if isinstance(t, tf.Tensor) and t.shape.rank else t
            for t in flat
        ],
    )


def split_sizes(global_batch: int, size: int) -> list[int]:
    """Rows each worker gets from a global batch of `global_batch` rows."""
    return [
        (r + 1) * global_batch // size - r * global_batch // size
        for r in range(size)
    ]


def for_workers(dataset, comm):
    """`experimental_distribute_dataset` for a dataset of global batches:
    this worker's part of each, or the whole batches under an elastic job,
    which slices them in the step among the members of the moment."""
    if getattr(comm, "membership", None) is not None:
        if sharded_into(dataset, {comm.width, comm.size}):
            raise ValueError(
                "An elastic HybridStrategy slices each global batch among "
                "the workers of the moment, so a pipeline sharded by worker "
                "(`dataset.shard(size, rank)`) cannot follow a resize. Give "
                "every worker the whole dataset of global batches: drop the "
                "`shard`."
            )
        return dataset
    return mark_per_worker(shard_dataset(dataset, comm.rank, comm.size))


def from_function(dataset_fn, comm):
    """`distribute_datasets_from_function`: the pipeline `dataset_fn` builds
    for this worker; refused under an elastic job."""
    if getattr(comm, "membership", None) is not None:
        raise ValueError(
            "An elastic HybridStrategy slices each global batch among the "
            "workers of the moment, so a pipeline per worker "
            "(`distribute_datasets_from_function`) cannot follow a resize. "
            "Give `fit` (or `experimental_distribute_dataset`) a dataset of "
            "global batches instead."
        )
    context = tf.distribute.InputContext(
        num_input_pipelines=comm.size,
        input_pipeline_id=comm.rank,
        num_replicas_in_sync=comm.size,
    )
    return mark_per_worker(dataset_fn(context))
