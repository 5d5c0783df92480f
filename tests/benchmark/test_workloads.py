"""Workloads build, train one step, and count unique ids as by hand."""

import numpy as np

from keras_hybrid.benchmark import traffic_bound
from keras_hybrid.benchmark import workloads
from keras_hybrid.testing import TestCase

TINY = workloads.WorkloadConfig(
    steps=2,
    vocab=50,
    dim=4,
    hidden=8,
    seq_len=3,
    num_sampled=2,
    batch_per_worker=4,
    table_rows=(30, 5, 2),
    dense_layers=1,
)


class WorkloadsTest(TestCase):
    def test_each_workload_trains_on_its_dataset(self):
        for name in workloads.WORKLOADS:
            model, dataset = workloads.build(name, TINY, num_workers=2)
            batches = list(dataset)
            self.assertEqual(len(batches), TINY.steps)
            x, _ = batches[0]
            self.assertEqual(len(next(iter(x.values()))), 8)
            history = model.fit(dataset, verbose=0)
            self.assertTrue(np.isfinite(history.history["loss"][0]), name)
            tables = workloads.table_features(name, TINY)
            for table, (rows, dim, _) in tables.items():
                layer = model.get_layer(table)
                self.assertEqual(tuple(layer.embeddings.shape), (rows, dim))

    def test_same_data_on_every_call(self):
        a, _ = workloads.make_arrays("recommender", TINY, 16)
        b, _ = workloads.make_arrays("recommender", TINY, 16)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
        self.assertTrue(all(0 <= a["cat_1"]) and all(a["cat_1"] < 5))

    def test_unique_ids_per_worker_slice(self):
        x, _ = workloads.make_arrays("lm", TINY, 2 * 8)
        got = traffic_bound.unique_ids_per_step("lm", TINY, 1, 2, 1)
        # Worker 1 of 2 gets rows 4..7 of global batch 1 (rows 8..15).
        rows = slice(12, 16)
        want_in = np.unique(x["tokens"][rows]).size
        want_out = np.unique(
            np.concatenate([x["targets"][rows], x["negatives"][rows]], None)
        ).size
        self.assertEqual(got["input_embedding"].tolist(), [want_in])
        self.assertEqual(got["softmax_weights"].tolist(), [want_out])

    def test_lower_bound_is_ring_plus_two_u_r(self):
        model, _ = workloads.build("dense", TINY, 1)
        params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
        bound = traffic_bound.lower_bound_bytes("dense", TINY, model, 0, 4, 0)
        self.assertEqual(bound, 2 * 3 / 4 * 4 * params)

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "workload.*Received: 'cnn'"):
            workloads.build("cnn", TINY, 2)
        with self.assertRaisesRegex(ValueError, "num_workers"):
            workloads.build("lm", TINY, 0)
        with self.assertRaisesRegex(ValueError, "vocab=0"):
            workloads.WorkloadConfig(vocab=0)
        with self.assertRaisesRegex(ValueError, "table_rows"):
            workloads.WorkloadConfig(table_rows=())
