"""The elastic example's plain `fit` script with tiny flags, in-process
(`measure_resize.py` runs it elastically; see docs/elastic.md)."""

import json
import os
import tempfile
import types

from tests.examples.main_test_case import ExampleMainTestCase


class ElasticMainTest(ExampleMainTestCase):
    example = "elastic"
    tiny = ("--hidden=8", "--num_samples=96", "--batch_size=24", "--epochs=1")

    def test_main_trains_and_reports_its_steps(self):
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            log = self.run_main(f"--report={report}")
            with open(report) as f:
                result = json.load(f)
        self.assertEqual(len(result["step_ends"]), 4)
        self.assertEqual(result["size"], 1)
        self.assertEqual(result["resizes"], [])
        self.assertIn("step 1: rank 0 of 1", log)

    def test_main_with_a_table_trains(self):
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            self.run_main(
                f"--report={report}", "--vocab=50", "--embedding_dim=4"
            )
            with open(report) as f:
                result = json.load(f)
        self.assertEqual(len(result["step_ends"]), 4)

    def test_die_at_step_counts_the_jobs_steps(self):
        global_step = self.main_module.global_step

        def strategy(membership):
            communicator = types.SimpleNamespace(membership=membership)
            return types.SimpleNamespace(communicator=communicator)

        # A joiner admitted at global step 30 that has run 11 steps since:
        # the job has run 41 steps before the one that just ended, which
        # `ElasticResize` counts after the user's callbacks.
        joiner = strategy(types.SimpleNamespace(global_step=41))
        self.assertEqual(global_step(joiner, local_steps=12), 42)
        # Without elastic training, the process's own steps.
        self.assertEqual(global_step(strategy(None), local_steps=12), 12)
