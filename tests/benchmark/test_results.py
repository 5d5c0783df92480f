"""Summaries of per-rank files, with numbers checkable by hand."""

import json
import os
import tempfile
import unittest

import numpy as np

from keras_hybrid.benchmark import results
from keras_hybrid.callbacks.communication_stats import _COLUMNS


def rank_file(rank, steps, sent, rows, bound):
    per_rank = np.zeros((2, len(_COLUMNS)))
    for r in range(2):
        for path, value in sent[r].items():
            per_rank[r, _COLUMNS.index(f"{path}_sent_bytes")] = value
            per_rank[r, _COLUMNS.index(f"{path}_received_bytes")] = value
        per_rank[r, _COLUMNS.index("rows_served")] = rows[r]
    return {
        "rank": rank,
        "global_batch": 10,
        "step_seconds": steps,
        "comm": {"columns": list(_COLUMNS), "per_rank": per_rank.tolist()},
        "lower_bound_bytes": bound,
    }


class SummarizeTest(unittest.TestCase):
    def setUp(self):
        sent = [{"dense": 100, "padding": 20}, {"dense": 100, "ids": 60}]
        self.ranks = [
            rank_file(0, [0.1, 0.2, 0.4], sent, [3, 1], 90.0),
            rank_file(1, [0.3, 0.1, 0.2], sent, [3, 1], 110.0),
        ]

    def test_summary(self):
        got = results.summarize("hybrid", self.ranks)
        # Slowest rank per step: 0.3, 0.2, 0.4 s.
        self.assertAlmostEqual(got["step_time_ms"]["median"], 300.0)
        self.assertAlmostEqual(got["samples_per_sec"], 10 * 3 / 0.9)
        self.assertAlmostEqual(got["step_time_ms"]["p90"], 380.0)
        self.assertEqual(
            got["bytes_per_step"],
            {
                "total": 140.0,  # (120 + 160) / 2
                "dense": 100.0,
                "sparse_pull": 0.0,
                "sparse_push": 0.0,
                "ids": 30.0,
                "padding": 10.0,
            },
        )
        self.assertEqual(got["lower_bound_bytes_per_step"], 100.0)
        self.assertAlmostEqual(got["padding_share"], 20 / 280)
        self.assertAlmostEqual(got["shard_imbalance"], 3 / 2)
        self.assertIn("hybrid", results.table([got]))

    def test_collectives_per_step(self):
        self.assertNotIn("calls_per_step", results.summarize("h", self.ranks))
        calls = {"ids": 1.0, "sparse_pull": 2.0, "sparse_push": 2.0}
        self.ranks[0]["calls_per_step"] = {**calls, "control": 4.5}
        got = results.summarize("hybrid", self.ranks)
        self.assertEqual(got["calls_per_step"]["sparse"], 5.0)
        line = results.table([got]).splitlines()[-1]
        # sparse_colls, ctrl_colls, busiest/mean (rows served).
        self.assertEqual(line.split()[-3:], ["5.0", "4.5", "1.50"])

    def test_read_ranks_names_a_missing_rank(self):
        out = tempfile.mkdtemp()
        with open(os.path.join(out, "rank0.json"), "w") as f:
            json.dump(self.ranks[0], f)
        self.assertEqual(results.read_ranks(out, 1)[0]["rank"], 0)
        with self.assertRaisesRegex(FileNotFoundError, "Worker 1"):
            results.read_ranks(out, 2)

    def test_merge_repeats_keeps_the_median_run(self):
        runs = [
            {"mode": "m", "samples_per_sec": s, "tag": i}
            for i, s in enumerate((5.0, 9.0, 7.0))
        ]
        merged = results.merge_repeats(runs)
        self.assertEqual(merged["tag"], 2)
        self.assertEqual(merged["samples_per_sec_runs"], [5.0, 9.0, 7.0])
        self.assertNotIn(
            "samples_per_sec_runs", results.merge_repeats(runs[:1])
        )

    def test_interface_bytes_only_when_every_rank_has_them(self):
        self.assertIsNone(
            results.summarize("hybrid", self.ranks)["interface_bytes_per_step"]
        )
        ranks = [
            {**r, "interface_bytes": {"sent": s, "received": s}}
            for r, s in zip(self.ranks, (147.0, 153.0), strict=True)
        ]
        got = results.summarize("hybrid", ranks)
        self.assertEqual(got["interface_bytes_per_step"], 150.0)
        # 150 seen on eth0 against 140 counted.
        self.assertIn("1.071", results.table([got]))

    def test_comparison_against_allgather(self):
        def result(mode, speed, total):
            return {
                "mode": mode,
                "samples_per_sec": speed,
                "bytes_per_step": {"total": total},
            }

        text = results.comparison(
            [result("hybrid", 30.0, 100.0), result("allgather", 10.0, 400.0)]
        )
        hybrid = text.splitlines()[2].split()
        # Speed-up 3, byte advantage 4, share 0.75.
        self.assertEqual(hybrid, ["hybrid", "3.00", "4.00", "0.75"])
        self.assertEqual(results.comparison([result("hybrid", 1, 1)]), "")


class HierarchicalComparisonTest(unittest.TestCase):
    def test_cross_host_bytes_summed_over_sparse_paths(self):
        sent = [{"dense": 100}, {"dense": 100}]
        ranks = [rank_file(r, [0.1], sent, [1, 1], 1.0) for r in range(2)]
        for r, (ids, pull) in enumerate(((10, 30), (20, 40))):
            ranks[r]["cross_host_bytes_per_step"] = {
                "ids": ids,
                "sparse_pull": pull,
                "sparse_push": 0,
                "dense": 999,  # not sparse
            }
            ranks[r]["hierarchical"] = True
        got = results.summarize("hybrid_hierarchical", ranks)
        self.assertEqual(got["cross_host_sparse_bytes_per_step"], 50.0)
        self.assertIs(got["hierarchical"], True)

    def test_ratios_against_flat(self):
        def result(mode, ms, cross, hierarchical):
            return {
                "mode": mode,
                "step_time_ms": {"median": ms},
                "cross_host_sparse_bytes_per_step": cross,
                "hierarchical": hierarchical,
            }

        text = results.hierarchical_comparison(
            [
                result("hybrid_flat", 100.0, 3000.0, False),
                result("hybrid_hierarchical", 104.0, 2000.0, True),
            ]
        )
        line = text.splitlines()[-1].split()
        # 3000 / 2000 = 1.5x fewer bytes, 104 / 100 = 1.04x the time.
        self.assertEqual(
            line, ["hybrid_hierarchical", "True", "2.0", "1.50", "1.040"]
        )
        self.assertEqual(
            results.hierarchical_comparison([result("x", 1.0, 1.0, True)]),
            "",
        )
