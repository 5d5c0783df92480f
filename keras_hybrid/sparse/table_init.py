"""Initial rows of one shard, the same whatever the number of shards.

A table of at most `WHOLE_DRAW_BYTES` is drawn whole by the layer's
initializer, with rank 0's seed, and each shard keeps its own rows: its
values are those a plain Keras layer draws from the same seed, on any
number of workers, so a script starts from the same weights with or without
the strategy, on 1, 2 or N workers. The drawn table is a transient buffer of
the table's size.

A bigger table is defined as fixed blocks of `BLOCK_ROWS` rows. Block b is
drawn by the layer's initializer with a seed derived from (seed, b), so
every row's initial value depends on the seed and its id only. A shard draws
the blocks one at a time and keeps its own rows: it never holds the whole
table, and 1, 2 or 4 shards start from the same table (not from a plain
Keras layer's values).

Initializers whose scale depends on the full shape (the `VarianceScaling`
family: Glorot, He, LeCun) are rescaled so a block has the variance the full
table would have. Initializers that couple rows (`Orthogonal`, `Identity`)
cannot be drawn by blocks and raise.
"""

import math
import random

import keras
import numpy as np
import tensorflow as tf

BLOCK_ROWS = 4096
# Tables up to this size are drawn whole, as plain Keras draws them.
WHOLE_DRAW_BYTES = 256 * 2**20
_ROW_INDEPENDENT = (
    keras.initializers.Zeros,
    keras.initializers.Ones,
    keras.initializers.Constant,
)
_WHOLE_SHAPE = (keras.initializers.Orthogonal, keras.initializers.Identity)
# Seeds drawn here, apart from the stream user code and Keras draw from.
_own_random = random.Random()


def rows_independent(initializer) -> bool:
    """Whether `initializer` can draw a table block by block."""
    return not isinstance(initializer, _WHOLE_SHAPE)


def drawn_whole(full_shape: tuple, dtype: str) -> bool:
    """Whether a table of `full_shape` is drawn in one piece."""
    size = math.prod(full_shape) * tf.as_dtype(dtype).size
    return size <= WHOLE_DRAW_BYTES


def check_initializer(
    initializer, path: str, full_shape: tuple, dtype: str
) -> None:
    """Raises `NotImplementedError` for initializers that couple rows, if
    the table is too big to be drawn whole."""
    if isinstance(initializer, _WHOLE_SHAPE) and not drawn_whole(
        full_shape, dtype
    ):
        raise NotImplementedError(
            f"Partitioned table {path!r} uses "
            f"{type(initializer).__name__}, which needs the whole table at "
            "once. Use a row-wise initializer (e.g. 'uniform', 'normal', "
            "'glorot_uniform'), or keep the table dense with "
            f"`HybridStrategy(variable_kinds={{{path!r}: 'dense'}})`."
        )


def base_seed(initializer) -> int:
    """The initializer's integer seed, 0 for one that draws nothing
    (`Zeros`, `Ones`, `Constant`), or a fresh one.

    Never drawn from Python's global `random`: Keras draws the default
    seed of each unseeded initializer from it when the initializer is
    made, so a draw here for a table (a `Constant` embedding matrix, say)
    shifted every later layer's initial weights away from plain Keras'.
    """
    seed = getattr(initializer, "seed", None)
    if isinstance(seed, int) and not isinstance(seed, bool):
        return seed
    if isinstance(initializer, _ROW_INDEPENDENT):
        return 0
    return _own_random.randint(1, 2**31 - 2)


def shard_rows(
    initializer,
    full_shape: tuple,
    dtype: str,
    partition,
    shard: int,
    seed: int,
) -> np.ndarray:
    """Initial values of the rows `shard` stores, in local-index order.

    Args:
        initializer: A Keras initializer or a callable `(shape, dtype)`.
        full_shape: Tuple of ints. Shape of the whole table.
        dtype: String. Variable dtype.
        partition: The table's `RowPartition`.
        shard: Int. The shard whose rows are wanted.
        seed: Int. Seed of the table (equal on all workers).

    Returns:
        A NumPy array of shape `(rows_on_shard, *full_shape[1:])`.
    """
    row_shape = tuple(full_shape[1:])
    num_local = partition.rows_on_shard(shard)
    if drawn_whole(full_shape, dtype) or _holds_a_table(initializer):
        table = _numpy(_reseeded(initializer, seed)(full_shape, dtype=dtype))
        ids = np.arange(full_shape[0], dtype=np.int64)
        mine = partition.shard_of(ids) == shard
        rows = np.empty((num_local, *row_shape), dtype=table.dtype)
        rows[partition.local_index(ids[mine])] = table[mine]
        return rows
    if isinstance(initializer, _ROW_INDEPENDENT):
        return _numpy(initializer((num_local, *row_shape), dtype=dtype))
    num_rows = full_shape[0]
    rows = None
    for block in range(math.ceil(num_rows / BLOCK_ROWS)):
        ids = np.arange(
            block * BLOCK_ROWS,
            min(num_rows, (block + 1) * BLOCK_ROWS),
            dtype=np.int64,
        )
        mine = partition.shard_of(ids) == shard
        if not mine.any():
            continue
        block_init = _block_initializer(
            initializer, seed, block, (len(ids), *row_shape), full_shape
        )
        values = _numpy(block_init((len(ids), *row_shape), dtype=dtype))
        if rows is None:
            rows = np.empty((num_local, *row_shape), dtype=values.dtype)
        # One block at a time, straight into place: the shard is the only
        # table-sized buffer.
        rows[partition.local_index(ids[mine])] = values[mine]
    return rows


def _holds_a_table(initializer) -> bool:
    """A `Constant` given the whole table (a pretrained embedding matrix):
    it is in memory already, and its rows are not all alike."""
    return isinstance(initializer, keras.initializers.Constant) and (
        np.ndim(initializer.value) > 0
    )


def _reseeded(initializer, seed: int):
    """`initializer` drawing from `seed` (rank 0's); unseeded ones as is."""
    if isinstance(initializer, keras.initializers.Initializer):
        config = initializer.get_config()
        if "seed" in config:
            config["seed"] = seed
            return type(initializer).from_config(config)
    return initializer


def _block_initializer(initializer, seed, block, block_shape, full_shape):
    """The initializer that draws `block` of a table seeded with `seed`."""
    block_seed = (seed * 1_000_003 + block) % (2**31 - 1)
    if isinstance(initializer, keras.initializers.VarianceScaling):
        scale = initializer.scale * _fan(block_shape, initializer.mode)
        scale /= _fan(full_shape, initializer.mode)
        return keras.initializers.VarianceScaling(
            scale=scale,
            mode=initializer.mode,
            distribution=initializer.distribution,
            seed=block_seed,
        )
    if isinstance(initializer, keras.initializers.Initializer) and hasattr(
        initializer, "seed"
    ):
        config = initializer.get_config()
        config["seed"] = block_seed
        return type(initializer).from_config(config)
    return initializer


def _fan(shape: tuple, mode: str) -> float:
    """Keras' fan of `shape` for a `VarianceScaling` `mode`."""
    if len(shape) == 1:
        fan_in = fan_out = shape[0]
    else:
        receptive = math.prod(shape[:-2])
        fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    if mode == "fan_in":
        return max(1.0, fan_in)
    if mode == "fan_out":
        return max(1.0, fan_out)
    return max(1.0, (fan_in + fan_out) / 2.0)


def _numpy(value) -> np.ndarray:
    return keras.ops.convert_to_numpy(value)
