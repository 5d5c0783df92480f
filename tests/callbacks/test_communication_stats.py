"""`CommunicationStats` on 2 real workers, against counts done by hand from
the data and the table's row partition; and its errors in one process."""

import csv
import functools
import io
import os
import tempfile

import keras
import numpy as np
import pytest

import keras_hybrid as kh
from keras_hybrid.callbacks import CommunicationStats
from keras_hybrid.callbacks.communication_stats import format_resizes
from keras_hybrid.callbacks.communication_stats import format_table
from keras_hybrid.comm import PATHS
from keras_hybrid.costs import table_exchange
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing import OneProcessTestCase
from keras_hybrid.testing.pool import run_scenario
from tests.callbacks.workers import stats_data as w

SCENARIOS = os.path.join(
    os.path.dirname(__file__), "workers", "stats_scenarios.py"
)
N = 2
STEPS = w.SAMPLES // w.GLOBAL_BATCH
ROW_BYTES = 4 * w.DIM


@functools.cache
def launch():
    folder = tempfile.mkdtemp(prefix="commstats_")
    run = run_scenario(SCENARIOS, "train", N, {"folder": folder}).check()
    assert sorted(run.results) == list(range(N))
    return run


def counts_by_hand(owner):
    """`C[s, i, j]`: unique ids of worker i's slice of step s owned by j."""
    ids, _ = w.make_data()
    counts = np.zeros((STEPS, N, N), np.int64)
    for s in range(STEPS):
        batch = ids[s * w.GLOBAL_BATCH : (s + 1) * w.GLOBAL_BATCH]
        for i in range(N):
            part = batch[
                i * w.GLOBAL_BATCH // N : (i + 1) * w.GLOBAL_BATCH // N
            ]
            unique = np.unique(part)
            counts[s, i] = np.bincount(owner[unique], minlength=N)
    return counts


@pytest.mark.multiprocess
class TestOnTwoWorkers:
    def test_epoch_logs_match_hand_counts(self):
        results = launch().results
        history = results[0]["history"]
        # Every rank logs the same (global) values.
        assert history == results[1]["history"]
        counts = counts_by_hand(results[0]["owner"])
        remote = counts.sum() - np.trace(counts, axis1=1, axis2=2).sum()
        served = counts.sum(axis=(0, 1))  # rows each shard served
        for epoch in range(w.EPOCHS):

            def log(name, epoch=epoch):
                return history["comm_" + name][epoch]

            # Ring all-reduce of the Dense layer, 2 (N - 1) / N D.
            dense = 2 * (N - 1) * results[0]["dense_bytes"] // N
            assert log("dense_sent_bytes") == dense
            assert log("dense_received_bytes") == dense
            # Rows served to, pushed from and asked by other workers.
            per_step = remote / STEPS / N
            assert log("sparse_pull_sent_bytes") == per_step * ROW_BYTES
            assert log("sparse_push_sent_bytes") == per_step * ROW_BYTES
            assert log("ids_sent_bytes") == per_step * 8
            for path in ("sparse_pull", "sparse_push", "ids", "padding"):
                assert log(f"{path}_received_bytes") == log(
                    f"{path}_sent_bytes"
                ), path
            total = sum(log(f"{p}_sent_bytes") for p in PATHS)
            assert log("total_sent_bytes") == pytest.approx(total)
            assert log("padding_share") == pytest.approx(
                log("padding_sent_bytes") / total
            )
            # Each pair's block padded to its own ladder step (exact up to
            # 32 rows, so 0 for these small slices).
            padding = table_exchange.exchange_bytes(counts, ROW_BYTES)[
                "padding"
            ]
            assert log("padding_sent_bytes") == pytest.approx(
                padding.sum() / STEPS / N
            )
            assert 0 <= log("padding_share") < 1
            assert log("shard_imbalance") == pytest.approx(
                served.max() / served.mean()
            )
            assert log("step_time_ms") > 0

    def test_every_n_steps_puts_entries_in_batch_logs(self):
        for result in launch().results.values():
            with_comm = [b for b, comm in result["batches"] if comm]
            # Batches 1 and 3 (0-based) of each epoch: every 2 steps.
            assert with_comm == [1, 3] * w.EPOCHS
            for _, comm in result["batches"]:
                if comm:
                    assert comm["comm_dense_sent_bytes"] > 0

    def test_csv_logger_records_the_entries(self):
        results = launch().results
        rows = list(csv.DictReader(io.StringIO(results[0]["csv"])))
        assert len(rows) == w.EPOCHS
        history = results[0]["history"]
        for name, values in history.items():
            if name.startswith("comm_"):
                got = [float(row[name]) for row in rows]
                np.testing.assert_allclose(got, values, rtol=1e-6)

    def test_chief_logs_a_table_at_the_end(self):
        run = launch()
        text = run.stdout + run.stderr
        assert "[0] " in text
        assert "Communication per train step (bytes)" in text
        summary = run.results[0]["summary"]
        # Bytes sent and received per path, rows served, step time.
        width = 2 * len(PATHS) + 2
        assert np.asarray(summary["per_rank"]).shape == (N, width)
        table = format_table(np.asarray(summary["per_rank"]))
        assert table.splitlines()[0].split()[:3] == ["rank", "dense", PATHS[1]]


class OneProcessTest(OneProcessTestCase):
    def test_bad_every_n_steps(self):
        for bad in (0, -1, 1.5, True, "2"):
            with self.assertRaisesRegex(ValueError, "every_n_steps"):
                CommunicationStats(every_n_steps=bad)

    def test_needs_a_hybrid_strategy(self):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        with self.assertRaisesRegex(ValueError, "HybridStrategy"):
            model.fit(
                np.zeros((4, 2)),
                np.zeros((4, 1)),
                callbacks=[CommunicationStats()],
                verbose=0,
            )

    def test_one_process_counts_rows_served_and_no_traffic(self):
        strategy = kh.HybridStrategy(variable_kinds=SPARSE_TABLES)
        with strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input((2,), dtype="int64"),
                    keras.layers.Embedding(10, 2),
                    keras.layers.Flatten(),
                    keras.layers.Dense(1),
                ]
            )
            model.compile(optimizer="sgd", loss="mse")
        ids = np.array([[1, 1], [2, 3], [4, 4], [4, 5]], np.int64)
        history = model.fit(
            ids,
            np.zeros((4, 1)),
            batch_size=2,
            shuffle=False,
            verbose=0,
            callbacks=[CommunicationStats()],
        )
        logs = {k: v[0] for k, v in history.history.items()}
        # One worker: nothing crosses a network; unique ids 3 and 2 are
        # served by its only shard, which is perfectly balanced.
        self.assertEqual(logs["comm_total_sent_bytes"], 0.0)
        self.assertEqual(logs["comm_shard_imbalance"], 1.0)

    def test_dynamic_tables_figures_join_the_epoch_logs(self):
        strategy = kh.HybridStrategy()
        with strategy.scope():
            keys = keras.Input(shape=(1,), dtype="int64")
            layer = kh.layers.DynamicEmbedding(
                2, capacity=2, eviction="lru", name="dyn"
            )
            model = keras.Model(keys, keras.ops.sum(layer(keys), axis=(1, 2)))
            model.compile(optimizer="sgd", loss="mse")
        # One key per step. Epoch 1: 1, 2, then 3 evicts 1, 1 evicts 2.
        # Epoch 2 starts with {3, 1}: 2 evicts 3, 3 evicts 1, 1 evicts 2.
        history = model.fit(
            np.array([[1], [2], [3], [1]]),
            np.zeros(4),
            batch_size=1,
            epochs=2,
            shuffle=False,
            verbose=0,
            callbacks=[CommunicationStats()],
        ).history
        self.assertEqual(history["dyn_embeddings_rows"], [2, 2])
        self.assertEqual(history["dyn_embeddings_admissions"], [4, 3])
        self.assertEqual(history["dyn_embeddings_evictions"], [2, 3])
        # The tables' own gathers are not the model's traffic.
        self.assertEqual(history["comm_total_sent_bytes"], [0.0, 0.0])


def test_a_resize_cut_short_shows_no_stall():
    event = {
        "global_step": 10,
        "reason": "discovery",
        "old_size": 2,
        "new_size": 4,
        "bytes_moved": 100,
        "table_wire_bytes": 40,
    }
    table = format_resizes(
        [
            {**event, "stall_seconds": 0.25},
            {**event, "stall_seconds": None, "cut_short": True},
        ]
    )
    rows = table.splitlines()
    assert rows[2].split()[-1] == "0.250"
    assert rows[3].split()[-2:] == ["cut", "short"]
