"""`profile_model` on small models, with counts checked by hand."""

import keras
import numpy as np

from keras_hybrid.simulate import profiler
from keras_hybrid.testing import TestCase

VOCAB, DIM, SEQ = 50, 4, 6


def _ids(batch_size, index):
    rng = np.random.default_rng(index)
    return rng.integers(0, VOCAB, size=(batch_size, SEQ)).astype("int64")


def _one_table_model():
    model = keras.Sequential(
        [
            keras.Input((SEQ,), dtype="int64"),
            keras.layers.Embedding(VOCAB, DIM, name="emb"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(3, name="out"),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def _batch(batch_size, index):
    return _ids(batch_size, index), np.zeros((batch_size, 3), "float32")


def _two_call_model():
    """One table looked up by two inputs (like a sampled softmax)."""
    a = keras.Input((SEQ,), dtype="int64", name="a")
    b = keras.Input((2,), dtype="int64", name="b")
    table = keras.layers.Embedding(VOCAB, DIM, name="shared")
    pooled = keras.layers.Concatenate()(
        [
            keras.layers.GlobalAveragePooling1D()(table(a)),
            keras.layers.GlobalAveragePooling1D()(table(b)),
        ]
    )
    model = keras.Model([a, b], keras.layers.Dense(1)(pooled))
    model.compile(optimizer="sgd", loss="mse")
    return model


def _two_inputs(batch_size, index):
    x = {"a": _ids(batch_size, index), "b": _ids(batch_size, index)[:, :2]}
    return x, np.zeros((batch_size, 1), "float32")


class ProfilerTest(TestCase):
    def test_tables_are_what_gets_indexed_slices(self):
        profile = profiler.profile_model(
            _one_table_model(), _batch, (4, 8), batches=3, timed_steps=1
        )
        kinds = {v.path: v.kind for v in profile.variables}
        self.assertEqual(
            kinds,
            {
                "sequential/emb/embeddings": "sparse",
                "sequential/out/kernel": "dense",
                "sequential/out/bias": "dense",
            },
        )
        (table,) = profile.of_kind("sparse")
        self.assertEqual((table.rows, table.row_bytes), (VOCAB, 4 * DIM))
        self.assertEqual((table.index_bytes, table.calls), (8, 1))
        self.assertEqual(table.lookups_per_sample, (float(SEQ),))
        for b, counted in zip((4, 8), table.unique[0], strict=True):
            by_hand = np.mean([np.unique(_ids(b, i)).size for i in range(3)])
            self.assertAlmostEqual(counted, by_hand)
        self.assertEqual(profile.batch_sizes, (4, 8))
        self.assertTrue(all(t > 0 for t in profile.compute_seconds))

    def test_counts_each_lookup_call_when_told_its_inputs(self):
        model = _two_call_model()
        path = model.get_layer("shared").embeddings.path
        one = profiler.profile_model(
            model, _two_inputs, (4, 8), batches=2, timed_steps=1
        ).of_kind("sparse")[0]
        self.assertEqual(one.lookups_per_sample, (SEQ + 2.0,))
        two = profiler.profile_model(
            model,
            _two_inputs,
            (4, 8),
            batches=2,
            timed_steps=1,
            call_inputs={path: ["a", "b"]},
        ).of_kind("sparse")[0]
        self.assertEqual(two.lookups_per_sample, (float(SEQ), 2.0))
        self.assertEqual(two.lookups(8), one.lookups(8))
        for call, name in enumerate(("a", "b")):
            by_hand = np.mean(
                [np.unique(_two_inputs(8, i)[0][name]).size for i in (0, 1)]
            )
            self.assertAlmostEqual(two.unique[call][1], by_hand)
        # Input b is the first two ids of input a: the calls together have
        # a's unique ids, which the fused exchange moves once.
        for b, together in zip((4, 8), two.table_unique, strict=True):
            by_hand = np.mean(
                [np.unique(_two_inputs(b, i)[0]["a"]).size for i in (0, 1)]
            )
            self.assertAlmostEqual(together, by_hand)
        self.assertEqual(one.table_unique, one.unique[0])

    def test_rejects_an_uncompiled_model(self):
        model = _one_table_model()
        model.optimizer = None
        with self.assertRaisesRegex(ValueError, "must be compiled"):
            profiler.profile_model(model, _batch, (4,))

    def test_rejects_bad_batch_sizes(self):
        with self.assertRaisesRegex(ValueError, "batch_sizes"):
            profiler.profile_model(_one_table_model(), _batch, (0, 4))
        with self.assertRaisesRegex(ValueError, "`batches` must be >= 1"):
            profiler.profile_model(_one_table_model(), _batch, (4,), 0)
