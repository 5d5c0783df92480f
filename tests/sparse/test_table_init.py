"""A partitioned table's initial rows: the values plain Keras draws, on any
number of shards; bigger tables by blocks, still the same on any number."""

from unittest import mock

import keras
import numpy as np

from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.sparse import table_init
from keras_hybrid.testing import TestCase

SHAPE = (1000, 6)
INITIALIZERS = {
    "uniform": lambda: keras.initializers.get("uniform"),
    "normal": lambda: keras.initializers.RandomNormal(stddev=0.3),
    "truncated": lambda: keras.initializers.TruncatedNormal(),
    "glorot": lambda: keras.initializers.GlorotUniform(),
    "he_normal": lambda: keras.initializers.HeNormal(seed=5),
    "orthogonal": lambda: keras.initializers.Orthogonal(),
    "zeros": lambda: keras.initializers.Zeros(),
    # A plain callable that depends on the whole shape (sinusoid-like).
    "callable": lambda: (
        lambda shape, dtype=None: np.sin(
            np.arange(np.prod(shape)).reshape(shape) / shape[0]
        ).astype("float32")
    ),
}


def table_from_shards(initializer, shards: int, seed: int, shape=SHAPE):
    partition = RowPartition.create(shape[0], shards)
    table = np.zeros(shape, np.float32)
    for shard in range(shards):
        rows = table_init.shard_rows(
            initializer, shape, "float32", partition, shard, seed
        )
        table[partition.ids_on_shard(shard)] = rows
    return table


class TableInitTest(TestCase):
    def test_shards_hold_the_table_plain_keras_draws(self):
        for name, make in INITIALIZERS.items():
            initializer = make()
            # What a plain Keras layer draws; rank 0's seed is its own.
            want = keras.ops.convert_to_numpy(initializer(SHAPE, "float32"))
            seed = table_init.base_seed(initializer)
            for shards in (1, 2, 3):
                got = table_from_shards(initializer, shards, seed)
                np.testing.assert_array_equal(got, want, err_msg=name)

    def test_another_ranks_seed_is_replaced_by_rank_0s(self):
        """Ranks seed differently; every shard draws with rank 0's seed."""
        rank0 = keras.initializers.RandomUniform(seed=11)
        rank1 = keras.initializers.RandomUniform(seed=12)
        want = keras.ops.convert_to_numpy(rank0(SHAPE, "float32"))
        got = table_from_shards(rank1, 2, seed=11)
        np.testing.assert_array_equal(got, want)

    def test_bigger_tables_are_drawn_by_blocks(self):
        shape = (3 * table_init.BLOCK_ROWS + 5, 2)
        with mock.patch.object(table_init, "WHOLE_DRAW_BYTES", 1024):
            for name in ("uniform", "glorot", "zeros"):
                initializer = INITIALIZERS[name]()
                one = table_from_shards(initializer, 1, 3, shape)
                for shards in (2, 3):
                    np.testing.assert_array_equal(
                        table_from_shards(initializer, shards, 3, shape),
                        one,
                        err_msg=name,
                    )
                if name != "zeros":
                    plain = keras.ops.convert_to_numpy(
                        initializer(shape, "float32")
                    )
                    self.assertFalse(np.array_equal(one, plain), name)
            with self.assertRaisesRegex(NotImplementedError, "Orthogonal"):
                table_init.check_initializer(
                    keras.initializers.Orthogonal(), "t", shape, "float32"
                )
        # Drawn whole, an Orthogonal table can be partitioned.
        table_init.check_initializer(
            keras.initializers.Orthogonal(), "t", shape, "float32"
        )

    def test_seeds_of_tables_leave_pythons_random_alone(self):
        # Keras draws each unseeded initializer's seed from Python's
        # `random` when it is made; a draw for a `Constant` table here
        # shifted every later layer's initial weights from plain Keras'.
        import random

        random.seed(4)
        expected = random.random()
        random.seed(4)
        for initializer in (
            keras.initializers.Zeros(),
            keras.initializers.Constant(np.ones(SHAPE)),
            lambda shape, dtype=None: np.zeros(shape),
        ):
            table_init.base_seed(initializer)
        self.assertEqual(random.random(), expected)

    def test_a_constant_matrix_gives_each_shard_its_rows(self):
        # A pretrained embedding matrix (keras-io's GloVe example), also
        # where bigger tables are otherwise drawn by blocks.
        shape = (2 * table_init.BLOCK_ROWS + 3, 2)
        matrix = np.random.default_rng(0).normal(size=shape).astype("float32")
        initializer = keras.initializers.Constant(matrix)
        for whole_bytes in (table_init.WHOLE_DRAW_BYTES, 1024):
            with mock.patch.object(table_init, "WHOLE_DRAW_BYTES", whole_bytes):
                for shards in (1, 3):
                    np.testing.assert_array_equal(
                        table_from_shards(initializer, shards, 0, shape), matrix
                    )
