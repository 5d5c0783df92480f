"""A table that does not fit says which table, and its capacity."""

import functools
import os
import tempfile
from unittest import mock

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid import HybridStrategy
from keras_hybrid.dynamic import table_memory
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.testing.test_case import TestCase


class TableMemoryTest(TestCase):
    def test_row_bytes_count_the_row_key_and_counters(self):
        self.assertEqual(table_memory.row_bytes(64, "float32", "int64"), 281)
        self.assertEqual(table_memory.row_bytes(8, "float16", "string"), 57)

    def test_reads_mem_available(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "meminfo")
            with open(path, "w") as f:
                f.write("MemTotal: 100 kB\nMemAvailable:   2048 kB\n")
            self.assertEqual(table_memory.available_bytes(path), 2048 * 1024)
            self.assertIsNone(table_memory.available_bytes(path + "x"))
        if os.path.exists("/proc/meminfo"):
            self.assertGreater(table_memory.available_bytes(), 0)

    def test_refuses_before_allocating_what_the_host_lacks(self):
        ran = []
        with self.assertRaisesRegex(
            tf.errors.ResourceExhaustedError,
            r"DynamicEmbedding 'users' needs 2\.8 GB for its table on "
            r"worker 3: capacity=10,000,000 rows of 64 float32.*"
            r"rows per worker.*1\.0 GB available",
        ):
            with table_memory.allocating(
                "users", 10**7, 64, "float32", "int64", 3, available=10**9
            ):
                ran.append(True)
        self.assertEqual(ran, [])

    def test_a_failed_allocation_names_the_table(self):
        with self.assertRaisesRegex(
            tf.errors.ResourceExhaustedError,
            r"DynamicEmbedding 'items' needs .* in this process: "
            r"capacity=1,000 rows.*\(OOM when allocating\)",
        ):
            with table_memory.allocating(
                "items", 1000, 4, "float32", "int64", available=10**12
            ):
                raise tf.errors.ResourceExhaustedError(
                    None, None, "OOM when allocating"
                )

    def test_a_layer_too_large_for_the_host_is_refused_at_build(self):
        # 10**12 rows of 64 floats: more than any host has, so the check
        # refuses before TensorFlow tries to fill it.
        keys = keras.Input(shape=(3,), dtype="int64")
        layer = DynamicEmbedding(64, capacity=10**12, name="user_ids")
        with self.assertRaisesRegex(
            tf.errors.ResourceExhaustedError,
            r"DynamicEmbedding 'user_ids' needs 281000\.0 GB for its "
            r"table in this process: capacity=1,000,000,000,000 rows",
        ):
            layer(keys)

    def test_a_layer_that_fits_builds(self):
        layer = DynamicEmbedding(4, capacity=100, name="small")
        out = layer(np.array([[1, 2, 3]], np.int64))
        self.assertEqual(tuple(out.shape), (1, 3, 4))

    def test_a_slot_the_host_lacks_is_refused_naming_the_table(self):
        with self.assertRaisesRegex(
            tf.errors.ResourceExhaustedError,
            r"Dynamic table 'users/embeddings' needs 2\.6 GB more for the "
            r"optimizer slot users_embeddings_velocity on worker 1: .*"
            r"capacity=10,000,000 rows of 64 float32.*1\.0 GB available",
        ):
            with table_memory.slot_allocating(
                "users/embeddings",
                10**7,
                64,
                "float32",
                1,
                "users_embeddings_velocity",
                available=10**9,
            ):
                pass

    def test_slots_are_checked_when_fit_builds_them(self):
        # Under the strategy Keras makes the slots through it, when `fit`
        # builds the optimizer: with too little memory left for a slot
        # (the table itself fitted), `fit` says which table.
        slot_bytes = 1000 * 8 * 4
        with HybridStrategy() as strategy:
            for available in (slot_bytes - 1, slot_bytes):
                with strategy.scope():
                    keys = keras.Input(shape=(3,), dtype="int64")
                    layer = DynamicEmbedding(8, capacity=1000, name="items")
                    out = keras.ops.sum(layer(keys), axis=(1, 2))
                    model = keras.Model(keys, out)
                    model.compile(optimizer="adam", loss="mse")
                memory = mock.patch.object(
                    table_memory, "available_bytes", return_value=available
                )
                fit = functools.partial(
                    model.fit, np.array([[1, 2, 3]]), np.ones(1), verbose=0
                )
                if available == slot_bytes:
                    with memory:
                        fit()  # it fits: trains
                    continue
                with (
                    memory,
                    self.assertRaisesRegex(
                        tf.errors.ResourceExhaustedError,
                        r"Dynamic table 'items/embeddings' needs 0\.0 GB more "
                        r"for the optimizer slot items_embeddings_momentum on "
                        r"worker 0",
                    ),
                ):
                    fit()
