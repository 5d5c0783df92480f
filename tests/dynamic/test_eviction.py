"""Admission and eviction of DynamicEmbedding, step by step, by hand."""

import keras
import numpy as np

from keras_hybrid.dynamic.initial_rows import InitialRows
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.testing.test_case import TestCase


def _steps(layer, *batches):
    """One training call of `layer` per batch of int keys."""
    for batch in batches:
        layer(np.array([batch], np.int64), training=True)


def _live(layer):
    return sorted(layer.live_keys()[0].tolist())


class EvictionTest(TestCase):
    def test_lfu_evicts_the_least_used_row(self):
        layer = DynamicEmbedding(2, capacity=2, eviction="lfu")
        _steps(layer, [1, 1, 1], [2, 2, 2], [3, 3, 3])
        # Keys 1 (3 uses) and 2 (1 use: once per call... counted per
        # lookup, so 3 too) tie; the lower row (key 1) goes.
        self.assertEqual(_live(layer), [2, 3])
        layer = DynamicEmbedding(2, capacity=2, eviction="lfu")
        _steps(layer, [1, 1, 1], [2, 1, 1], [3, 3, 3])
        self.assertEqual(_live(layer), [1, 3])
        self.assertEqual(layer.stats()["evictions"], 1)

    def test_lru_evicts_the_longest_unused_row(self):
        layer = DynamicEmbedding(2, capacity=2, eviction="lru")
        _steps(layer, [1, 1, 1], [2, 2, 2], [3, 3, 3])
        self.assertEqual(_live(layer), [2, 3])
        layer = DynamicEmbedding(2, capacity=2, eviction="lru")
        _steps(layer, [1, 1, 1], [2, 2, 2], [1, 1, 1], [3, 3, 3])
        self.assertEqual(_live(layer), [1, 3])

    def test_ttl_expires_unused_rows(self):
        layer = DynamicEmbedding(2, capacity=4, eviction="ttl:2")
        _steps(layer, [1, 1, 1], [2, 2, 2], [2, 2, 2])
        self.assertEqual(_live(layer), [1, 2])
        # Step 3: key 1, last used at step 0, is unused for 3 > 2 steps.
        _steps(layer, [2, 2, 2])
        self.assertEqual(_live(layer), [2])
        self.assertEqual(layer.stats()["expirations"], 1)

    def test_rows_never_exceed_capacity(self):
        rng = np.random.default_rng(0)
        for eviction in ("lfu", "lru", "ttl:3", None):
            layer = DynamicEmbedding(2, capacity=5, eviction=eviction)
            for _ in range(30):
                _steps(layer, rng.integers(0, 40, size=3))
                stats = layer.stats()
                self.assertLessEqual(stats["rows"], 5, eviction)
                # The key index and the live rows agree.
                self.assertEqual(
                    int(layer.table.index.size()), stats["rows"], eviction
                )
            # Keys came and went, except without eviction.
            self.assertGreaterEqual(stats["admissions"], 5, eviction)
            if eviction is not None:
                self.assertGreater(stats["admissions"], 5, eviction)

    def test_a_full_step_admits_what_fits_and_rejects_the_rest(self):
        layer = DynamicEmbedding(2, capacity=2, eviction="lfu")
        out = layer(np.array([[7, 8, 9]]), training=True).numpy()
        # Rows read in this step are protected: 9 finds no room.
        self.assertEqual(_live(layer), [7, 8])
        self.assertEqual(layer.stats()["rejections"], 1)
        np.testing.assert_array_equal(out[0, 2], [0.0, 0.0])

    def test_without_eviction_a_full_table_admits_nothing(self):
        layer = DynamicEmbedding(2, capacity=2)
        _steps(layer, [1], [2], [3], [3])
        self.assertEqual(_live(layer), [1, 2])
        self.assertEqual(layer.stats()["rejections"], 2)

    def test_admit_after_counts_steps_not_lookups(self):
        layer = DynamicEmbedding(2, capacity=4, admit_after=2)
        _steps(layer, [5, 5, 5])
        self.assertEqual(_live(layer), [])
        _steps(layer, [5])
        self.assertEqual(_live(layer), [5])


class ReadmissionTest(TestCase):
    def test_an_evicted_key_restarts_from_its_initial_row_and_slots(self):
        keys = keras.Input(shape=(1,), dtype="int64")
        layer = DynamicEmbedding(3, capacity=1, eviction="lru")
        model = keras.Model(keys, keras.ops.sum(layer(keys), axis=(1, 2)))
        model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
        model.fit(np.array([[11]] * 4), np.ones(4), batch_size=1, verbose=0)
        initial = InitialRows("uniform")
        trained = layer.embeddings.numpy()[0]
        self.assertGreater(
            np.abs(trained - initial(np.array([11]), 3)[0]).max(), 0.1
        )
        slots = [
            v
            for v in model.optimizer.variables
            if v.name.startswith("dynamic_embedding_embeddings_")
        ]
        self.assertEqual(len(slots), 2)  # Adam's m and v
        self.assertGreater(np.abs(slots[0].numpy()).max(), 0)
        _steps(layer, [12])  # evicts 11: the table holds one row
        for slot in slots:
            np.testing.assert_array_equal(slot.numpy(), 0.0)
        _steps(layer, [11])
        np.testing.assert_allclose(
            layer.embeddings.numpy()[0], initial(np.array([11]), 3)[0]
        )
        self.assertEqual(layer.stats()["evictions"], 2)


class OptimizerSlotsTest(TestCase):
    """Every stock element-wise optimizer trains the table, and a row given
    to a new key gets its slots' initial values back."""

    def _evict_after_training(self, optimizer, dtype_policy=None):
        keys = keras.Input(shape=(1,), dtype="int64")
        layer = DynamicEmbedding(
            3, capacity=1, eviction="lru", dtype=dtype_policy
        )
        out = keras.ops.cast(keras.ops.sum(layer(keys), axis=(1, 2)), "float32")
        model = keras.Model(keys, out)
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(np.array([[11]] * 3), np.ones(3), batch_size=1, verbose=0)
        before = layer.embeddings.numpy()[0].copy()
        _steps(layer, [12])
        return model, layer, before

    def test_slots_restart_with_their_row(self):
        cases = {
            "SGD": (keras.optimizers.SGD(0.1, momentum=0.9), {"momentum": 0}),
            "Adam": (
                keras.optimizers.Adam(0.1),
                {"momentum": 0, "velocity": 0},
            ),
            "AdamW": (keras.optimizers.AdamW(0.1), {"momentum": 0}),
            "Adagrad": (
                keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.3),
                {"accumulator": 0.3},
            ),
            "RMSprop": (keras.optimizers.RMSprop(0.1), {"velocity": 0}),
            "Ftrl": (
                keras.optimizers.Ftrl(0.1, initial_accumulator_value=0.2),
                {"accumulator": 0.2, "linear": 0},
            ),
        }
        for name, (optimizer, initial) in cases.items():
            keras.backend.clear_session()
            model, layer, before = self._evict_after_training(optimizer)
            new_row = InitialRows("uniform")(np.array([12]), 3)[0]
            self.assertFalse(np.allclose(before, new_row), name)
            np.testing.assert_allclose(
                layer.embeddings.numpy()[0], new_row, err_msg=name
            )
            prefix = "dynamic_embedding_embeddings_"
            for slot, value in initial.items():
                (variable,) = [
                    v
                    for v in model.optimizer.variables
                    if v.name == prefix + slot
                ]
                np.testing.assert_allclose(
                    variable.numpy(), value, err_msg=f"{name} {slot}"
                )

    def test_mixed_precision_with_loss_scaling(self):
        optimizer = keras.optimizers.LossScaleOptimizer(
            keras.optimizers.Adam(0.1)
        )
        model, layer, before = self._evict_after_training(
            optimizer, "mixed_float16"
        )
        self.assertEqual(layer.compute_dtype, "float16")
        self.assertEqual(layer.embeddings.dtype, "float32")
        slots = [
            v
            for v in model.optimizer.inner_optimizer.variables
            if v.name.startswith("dynamic_embedding_embeddings_")
        ]
        self.assertEqual(len(slots), 2)
        for slot in slots:
            np.testing.assert_array_equal(slot.numpy(), 0.0)


class StatsCallbackTest(TestCase):
    def test_epoch_logs_count_rows_admissions_and_evictions(self):
        from keras_hybrid.callbacks import DynamicTableStats

        keys = keras.Input(shape=(1,), dtype="int64")
        layer = DynamicEmbedding(2, capacity=2, eviction="lru", name="dyn")
        model = keras.Model(keys, keras.ops.sum(layer(keys), axis=(1, 2)))
        model.compile(optimizer="sgd", loss="mse")
        # One key per step. Epoch 1: 1, 2, then 3 evicts 1, 1 evicts 2.
        # Epoch 2 starts with {3, 1}: 1 is live, 2 evicts 3, 3 evicts 1,
        # 1 evicts 2.
        data = np.array([[1], [2], [3], [1]])
        history = model.fit(
            data,
            np.zeros(4),
            batch_size=1,
            epochs=2,
            shuffle=False,
            verbose=0,
            callbacks=[DynamicTableStats()],
        ).history
        self.assertEqual(history["dyn_embeddings_rows"], [2, 2])
        self.assertEqual(history["dyn_embeddings_admissions"], [4, 3])
        self.assertEqual(history["dyn_embeddings_evictions"], [2, 3])
        self.assertEqual(history["dyn_embeddings_rejections"], [0, 0])


class RecompileTest(TestCase):
    def test_a_new_optimizer_gets_its_slots_reset(self):
        keys = keras.Input(shape=(1,), dtype="int64")
        layer = DynamicEmbedding(3, capacity=1, eviction="lru")
        model = keras.Model(keys, keras.ops.sum(layer(keys), axis=(1, 2)))
        model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
        model.fit(np.array([[11]] * 2), np.ones(2), batch_size=1, verbose=0)
        model.compile(optimizer=keras.optimizers.SGD(0.1, 0.9), loss="mse")
        model.fit(np.array([[11]] * 2), np.ones(2), batch_size=1, verbose=0)
        (momentum,) = [
            v
            for v in model.optimizer.variables
            if v.name == "dynamic_embedding_embeddings_momentum"
        ]
        self.assertGreater(np.abs(momentum.numpy()).max(), 0)
        _steps(layer, [12])
        np.testing.assert_array_equal(momentum.numpy(), 0.0)


class WaitingKeysTest(TestCase):
    def test_counts_are_forgotten_when_more_than_capacity_keys_wait(self):
        layer = DynamicEmbedding(2, capacity=3, admit_after=2)
        _steps(layer, [1, 2, 3])
        self.assertEqual(int(layer.table.counts.size()), 3)
        # 5 > 3 keys wait: those not seen in this step (1, 2, 3) go.
        _steps(layer, [4, 5])
        self.assertEqual(int(layer.table.counts.size()), 2)
        _steps(layer, [1])  # counted from scratch: not admitted
        self.assertEqual(_live(layer), [])
        # 6, 7 and 8 overflow the count table, but 1, seen in the step
        # before, kept its count and is admitted.
        _steps(layer, [1, 6, 7, 8])
        self.assertEqual(_live(layer), [1])
        # Many new keys every step still let consecutive keys in.
        layer = DynamicEmbedding(2, capacity=3, admit_after=2)
        _steps(layer, [9, 10, 11, 12, 13], [9, 14, 15, 16, 17])
        self.assertEqual(_live(layer), [9])
