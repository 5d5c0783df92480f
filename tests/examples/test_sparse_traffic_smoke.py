"""The sparse traffic example with tiny flags: in-process, and on 2 workers."""

import contextlib
import importlib.util
import io
import json
import math
import os
import tempfile

import numpy as np
import pytest
from absl import app
from absl import flags
from absl.testing import flagsaver

from keras_hybrid.testing import TestCase
from keras_hybrid.testing import run_workers

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "sparse_traffic", "main.py")
TINY = (
    "--vocab=512",
    "--dim=8",
    "--seqs_per_worker=8",
    "--seq_len=8",
    "--warmup_steps=1",
    "--steps=3",
)
SPARSE_PATHS = ("sparse_pull", "sparse_push", "ids", "padding")


class SparseTrafficSmokeTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # The example defines absl flags on import; they are removed again
        # in tearDownClass so other tests see FLAGS as they were.
        before = set(FLAGS)
        spec = importlib.util.spec_from_file_location("sparse_traffic", SCRIPT)
        cls.example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.example)
        cls.added_flags = set(FLAGS) - before

    @classmethod
    def tearDownClass(cls):
        for name in cls.added_flags:
            delattr(FLAGS, name)
        super().tearDownClass()

    def _main(self, *argv) -> str:
        """Runs the example's `main` with `TINY` flags; returns stdout."""
        out = io.StringIO()
        with flagsaver.flagsaver(), contextlib.redirect_stdout(out):
            was_parsed = FLAGS.is_parsed()
            FLAGS(["main.py", *TINY])
            try:
                self.example.main(["main.py", *argv])
            finally:
                if not was_parsed:
                    FLAGS.unparse_flags()
        return out.getvalue()

    def test_one_worker_sends_nothing_over_the_network(self):
        with _environ_without("TF_CONFIG"):
            printed = self._main()
        line = [x for x in printed.splitlines() if "SPARSE_TRAFFIC_JSON" in x]
        fig = json.loads(line[0].split(" ", 1)[1])
        self.assertEqual((fig["workers"], fig["steps"]), (1, 3))
        job = fig["job"]
        for path in (*SPARSE_PATHS, "dense", "control"):
            self.assertEqual(job[path], 0, path)
        self.assertEqual(job["ratio_all"], 0.0)
        self.assertIsNone(job["ratio_remote"])  # no remote ids at all
        self.assertEqual(job["remote"], 0)
        # Unique ids per step, recomputed from the same data by hand.
        ids, _ = self.example.make_data(4 * 8, 8, 512, 1.1, 0)
        unique = [len(np.unique(ids[s * 8 : (s + 1) * 8])) for s in (1, 2, 3)]
        self.assertAlmostEqual(job["unique"], np.mean(unique))
        self.assertAlmostEqual(job["bound_all"], np.mean(unique) * (64 + 8))
        self.assertIn("ratio_all", printed)

    def test_rejects_extra_arguments(self):
        with self.assertRaisesRegex(app.UsageError, "Unexpected arguments"):
            self._main("oops")

    @pytest.mark.multiprocess
    def test_two_workers_send_at_least_the_remote_bound(self):
        with tempfile.TemporaryDirectory() as out_dir:
            run_workers(SCRIPT, 2, out_dir, args=TINY, timeout=120).check()
            with open(os.path.join(out_dir, "sparse_traffic.json")) as f:
                fig = json.load(f)
        self.assertEqual(fig["workers"], 2)
        job = fig["job"]
        self.assertGreater(job["remote"], 0)
        self.assertTrue(math.isfinite(job["ratio_remote"]))
        self.assertGreaterEqual(job["ratio_remote"], 1.0)
        self.assertLessEqual(job["ratio_all"], 1.3)
        for worker in fig["per_worker"]:
            expected = worker["expected"]
            # What each path carried is what the ids, the partition and
            # the capacity ladder predict, byte for byte.
            for path in ("sparse_pull", "sparse_push", "ids"):
                self.assertAlmostEqual(worker[path], expected[path])
            self.assertAlmostEqual(worker["ids"], 8 * worker["remote"])
            padding = sum(
                v for k, v in expected.items() if k.startswith("padding_")
            )
            self.assertAlmostEqual(worker["padding"], padding)
            self.assertGreater(worker["dense"], 0)


@contextlib.contextmanager
def _environ_without(name: str):
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved
