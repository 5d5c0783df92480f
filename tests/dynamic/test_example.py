"""examples/dynamic_embedding: `main()`, the memory script and the scaling
driver (1 and 2 workers), with tiny flags."""

import json
import os
import re
import sys
import tempfile
import unittest

import pytest

from tests.examples.main_test_case import ExampleMainTestCase
from tests.examples.main_test_case import run_example


class DynamicEmbeddingExampleTest(ExampleMainTestCase):
    example = "dynamic_embedding"
    tiny = (
        "--steps=3",
        "--warmup_steps=1",
        "--batch_size=8",
        "--seq_len=2",
        "--dim=4",
        "--capacity=20",
    )

    def test_main_times_both_models_and_reports_the_table(self):
        log = self.run_main()
        self.assertRegex(log, r"static +[\d.]+ ms/step")
        self.assertRegex(log, r"dynamic +[\d.]+ ms/step")
        self.assertRegex(log, r"dynamic / static step time: [\d.]+")
        self.assertRegex(log, r"static_live +[\d.]+ ms/step")
        self.assertRegex(log, r"dynamic / static of the \d+ live rows: [\d.]+")
        self.assertIn("'rows': ", log)

    def test_string_keys_train_the_dynamic_model(self):
        log = self.run_main("--string_keys")
        self.assertRegex(log, r"dynamic +[\d.]+ ms/step")
        rows = re.search(r"'rows': (\d+)", log)
        self.assertIsNotNone(rows, log)
        self.assertGreater(int(rows.group(1)), 0)


class MemoryScriptTest(unittest.TestCase):
    def test_memory_script_reports_resident_memory(self):
        result = run_example(
            [
                sys.executable,
                "examples/dynamic_embedding/memory.py",
                "--distinct_keys=2000",
                "--capacity=100",
                "--dim=4",
                "--batch_size=8",
            ]
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertRegex(result.stderr, r"resident \d+ MB, peak \d+ MB")
        # 128 new keys a step, 100 rows: the table stays full.
        self.assertIn("{'rows': 100,", result.stderr)


@pytest.mark.multiprocess
class ScalingScriptTest(unittest.TestCase):
    def test_both_models_on_each_worker_count_side_by_side(self):
        out = os.path.join(tempfile.mkdtemp(), "scaling.json")
        result = run_example(
            [
                sys.executable,
                "-m",
                "examples.dynamic_embedding.scaling",
                "--workers=1,2",
                "--steps=3",
                "--warmup_steps=1",
                "--batch_size=8",
                "--capacity=50",
                f"--out={out}",
            ],
            timeout=600,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("lookups/s/worker", result.stdout)
        self.assertIn("launch 2 of 2: 2 workers", result.stderr)
        with open(out) as f:
            runs = json.load(f)
        self.assertEqual(sorted(runs), ["1", "2"])
        for count, reports in runs.items():
            self.assertEqual(
                [r["rank"] for r in reports], list(range(int(count)))
            )
            for report in reports:
                self.assertEqual(report["workers"], int(count))
                for name in ("static", "dynamic", "static_live"):
                    figures = report[name]
                    # 8 samples x 16 keys per worker and step.
                    self.assertAlmostEqual(
                        figures["lookups_per_second_per_worker"]
                        * figures["ms_per_step"]
                        / 1e3,
                        8 * 16,
                        places=3,
                    )
                    self.assertGreater(
                        figures["resident_mb_after"], report["baseline_mb"]
                    )
                self.assertAlmostEqual(
                    report["ratio"],
                    report["dynamic"]["ms_per_step"]
                    / report["static"]["ms_per_step"],
                )
                self.assertAlmostEqual(
                    report["ratio_live"],
                    report["dynamic"]["ms_per_step"]
                    / report["static_live"]["ms_per_step"],
                )
                # The static table holds the dynamic one's capacity on all
                # workers; the live-row one what the dynamic one filled.
                self.assertEqual(report["static_rows"], 50 * int(count))
                # The job's rows, summed over the workers, on every rank.
                self.assertGreater(report["dynamic_stats"]["rows"], 0)
                self.assertEqual(
                    report["static_live_rows"],
                    max(report["dynamic_stats"]["rows"], int(count)),
                )
                self.assertEqual(
                    report["dynamic_stats"], reports[0]["dynamic_stats"]
                )
            # The static table is placed by the plan (50 or 100 rows:
            # replicated).
            self.assertIn("embedding/embeddings", reports[0]["plan"])
