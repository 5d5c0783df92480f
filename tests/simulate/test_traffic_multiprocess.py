"""The simulator's bytes against `CommStats` of real 2-worker runs.

One launch trains `workers/traffic_model.py` with a partitioned table
(hybrid), one with the table replicated (all-gather). From the ids each
worker looked up, `table_exchange.exchange_bytes` must give the counters of
every step byte for byte; from a one-process profile alone, the
prediction must give the dense and all-gather bytes exactly and the
hybrid's sparse bytes within a stated tolerance (the unique ids are a
fitted curve, the padding a Monte Carlo estimate).
"""

import os
import sys

import numpy as np
import pytest

from keras_hybrid.costs import cluster_spec
from keras_hybrid.costs import cost_model
from keras_hybrid.costs import table_exchange
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.simulate import profiler
from keras_hybrid.testing import TestCase
from keras_hybrid.testing.pool import run_scenario

pytestmark = pytest.mark.multiprocess

HERE = os.path.dirname(__file__)
SCENARIOS = os.path.join(HERE, "workers", "traffic_scenarios.py")
sys.path.insert(0, os.path.join(HERE, "workers"))
import traffic_model as tm  # noqa: E402

WARMUP, STEPS, N = 1, 4, 2
# Hybrid sparse bytes predicted from the profile: payload (pull, push,
# ids) within 10%; padding (per pair, a few rows of ladder rounding above
# 32 rows, none below) within 2% of the payload.
PAYLOAD_TOLERANCE, PADDING_TOLERANCE = 0.10, 0.02


def _launch(mode: str) -> dict:
    run = run_scenario(
        SCENARIOS,
        "measure",
        N,
        {"mode": mode, "warmup_steps": WARMUP, "steps": STEPS},
        timeout=240,
    ).check()
    assert sorted(run.results) == list(range(N))
    return run.results


def _make_batch(batch_size, index):
    ids, labels = tm.make_data(batch_size, seed=100 + index)
    return ids, labels


class TrafficAgainstCountersTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.runs = {mode: _launch(mode) for mode in ("hybrid", "allgather")}
        global_batch = tm.SEQS_PER_WORKER * N
        ids, _ = tm.make_data((WARMUP + STEPS) * global_batch)
        cls.slices = tm.worker_slices(
            ids[WARMUP * global_batch :], N, global_batch
        )
        model = tm.build_model()
        cls.profile = profiler.profile_model(
            model, _make_batch, (8, 16, 32), batches=4, timed_steps=1
        )

    def _sent(self, mode: str, path: str) -> np.ndarray:
        """`[steps, workers]` bytes the real run sent on `path`."""
        results = self.runs[mode]
        paths = list(results[0]["paths"])
        return np.stack(
            [results[r]["sent"][:, paths.index(path)] for r in range(N)], 1
        )

    def _predict(self, mode: str):
        return cost_model.predict(
            self.profile,
            mode,
            cluster_spec.ClusterSpec(workers=N),
            tm.SEQS_PER_WORKER,
        )

    def test_plan_is_what_each_launch_asked_for(self):
        table = "sequential/tokens/embeddings"
        self.assertEqual(self.runs["hybrid"][0]["kinds"][table], "sparse")
        self.assertEqual(self.runs["allgather"][0]["kinds"][table], "dense")

    def test_hybrid_bytes_from_the_ids_equal_the_counters(self):
        partition = RowPartition.create(tm.VOCAB, N)
        counts = np.stack(
            [
                table_exchange.count_matrices(step, partition)
                for step in self.slices
            ]
        )
        expected = table_exchange.exchange_bytes(counts, 4 * tm.DIM)
        self.assertEqual(expected["ids"].shape, (STEPS, N))
        for path in ("ids", "sparse_pull", "sparse_push", "padding"):
            np.testing.assert_array_equal(
                self._sent("hybrid", path), expected[path], err_msg=path
            )
        self.assertGreater(expected["sparse_pull"].min(), 0)

    def test_dense_bytes_are_predicted_exactly(self):
        dense_bytes = sum(v.bytes for v in self.profile.of_kind("dense"))
        self.assertEqual(dense_bytes, (16 * 32 + 32 + 32 * 4 + 4) * 4)
        for mode in ("hybrid", "allgather"):
            predicted = self._predict(mode).bytes["dense"]
            self.assertEqual(predicted, 2 * (N - 1) * dense_bytes // N)
            np.testing.assert_array_equal(
                self._sent(mode, "dense"), predicted, err_msg=mode
            )

    def test_allgather_bytes_are_predicted_exactly(self):
        predicted = self._predict("allgather").bytes
        lookups = tm.SEQS_PER_WORKER * tm.SEQ_LEN
        self.assertEqual(predicted["sparse_push"], lookups * 4 * tm.DIM)
        for path in ("sparse_push", "ids", "padding", "sparse_pull"):
            np.testing.assert_array_equal(
                self._sent("allgather", path), predicted[path], err_msg=path
            )

    def test_hybrid_bytes_from_the_profile_are_close(self):
        predicted = self._predict("hybrid").bytes
        payload = ("ids", "sparse_pull", "sparse_push")
        measured = sum(self._sent("hybrid", p).mean() for p in payload)
        guess = sum(predicted[p] for p in payload)
        self.assertLess(abs(guess / measured - 1), PAYLOAD_TOLERANCE)
        padding = self._sent("hybrid", "padding").mean()
        self.assertLess(
            abs(predicted["padding"] - padding) / measured,
            PADDING_TOLERANCE,
            msg=f"padding: predicted {predicted['padding']}, "
            f"measured {padding}, payload {measured}",
        )


class DynamicTableTrafficTest(TestCase):
    """A `DynamicEmbedding` of hashed keys (admitted at their second
    lookup): the simulator's bytes from a one-process profile against
    the counters of a 2-worker run."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.results = _launch("dynamic")

        def make_batch(batch_size, index):
            ids, labels = tm.make_data(batch_size, seed=100 + index)
            return tm.to_keys(ids), labels

        cls.profile = profiler.profile_model(
            tm.build_dynamic_model(), make_batch, (8, 16, 32), 4, 1
        )

    def _sent(self, path: str) -> np.ndarray:
        paths = list(self.results[0]["paths"])
        return np.stack(
            [self.results[r]["sent"][:, paths.index(path)] for r in range(N)], 1
        )

    def test_the_profile_counts_keys_not_admitted_rows(self):
        (table,) = self.profile.of_kind("sparse")
        self.assertTrue(table.dynamic)
        self.assertEqual(table.rows, tm.VOCAB)  # the capacity per worker
        # Keys admitted at their second lookup: the gradient's rows are
        # fewer than the keys the exchange moves; the profile has the keys.
        ids, _ = tm.make_data(32, seed=100)
        keys = np.unique(tm.to_keys(ids)).size
        self.assertAlmostEqual(table.unique[0][-1], keys, delta=0.3 * keys)

    def test_each_key_travels_with_its_count(self):
        # One [key, uses] int64 pair per key sent, one row pushed back.
        np.testing.assert_array_equal(
            self._sent("ids") * 4 * tm.DIM, self._sent("sparse_push") * 16
        )

    def test_dynamic_bytes_from_the_profile_are_close(self):
        predicted = cost_model.predict(
            self.profile,
            "hybrid",
            cluster_spec.ClusterSpec(workers=N),
            tm.SEQS_PER_WORKER,
        ).bytes
        payload = ("ids", "sparse_pull", "sparse_push")
        measured = sum(self._sent(p).mean() for p in payload)
        guess = sum(predicted[p] for p in payload)
        self.assertLess(
            abs(guess / measured - 1),
            PAYLOAD_TOLERANCE,
            msg=f"predicted {guess}, measured {measured}",
        )
        self.assertEqual(
            predicted["ids"] * 4 * tm.DIM, predicted["sparse_push"] * 16
        )
        padding = self._sent("padding").mean()
        self.assertLess(
            abs(predicted["padding"] - padding) / measured,
            PADDING_TOLERANCE,
            msg=f"padding: predicted {predicted['padding']}, "
            f"measured {padding}, payload {measured}",
        )
