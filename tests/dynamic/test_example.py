"""examples/dynamic_embedding: `main()` and the memory script, with tiny
flags."""

import sys
import unittest

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
        self.assertIn("'rows': ", log)


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
