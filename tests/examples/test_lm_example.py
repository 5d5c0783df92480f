"""The LM example: `main()` with tiny flags, the text path, `--model_dir`,
and 2 workers against one process."""

import csv
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from absl import app

from examples.lm import corpus
from examples.lm import train
from tests.examples.main_test_case import ROOT
from tests.examples.main_test_case import ExampleMainTestCase

TINY = (
    "--steps=3",
    "--batch_size=8",
    "--epochs=1",
    "--vocab=200",
    "--seq_len=5",
    "--dim=8",
    "--hidden=8",
    "--num_sampled=8",
)
PERPLEXITY = "held-out perplexity per epoch:"


def _step_losses(path: str) -> list[float]:
    with open(path) as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


class LMMainTest(ExampleMainTestCase):
    example = "lm"
    tiny = TINY

    def test_synthetic_data_logs_perplexity_steps_and_tensorboard(self):
        with tempfile.TemporaryDirectory() as tmp:
            steps_csv = os.path.join(tmp, "steps.csv")
            log = self.run_main(
                "--epochs=2", f"--step_log={steps_csv}", f"--log_dir={tmp}"
            )
            self.assertIn("1 worker(s), vocabulary 200;", log)
            perplexity = self.figures(log, PERPLEXITY)
            self.assertEqual(len(perplexity), 2)
            self.assertTrue(all(1 < p < 10 * 200 for p in perplexity))
            losses = _step_losses(steps_csv)
            self.assertEqual(len(losses), 2 * 3)
            self.assertTrue(np.all(np.isfinite(losses)))
            self.assertTrue(glob.glob(f"{tmp}/train/events.out.tfevents.*"))

    def test_model_dir_resumes_after_the_last_finished_epoch(self):
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = os.path.join(tmp, "model")
            steps_csv = os.path.join(tmp, "steps.csv")
            first = self.run_main(f"--model_dir={model_dir}")
            self.assertEqual(len(self.figures(first, PERPLEXITY)), 1)
            self.assertTrue(os.listdir(model_dir))
            second = self.run_main(
                f"--model_dir={model_dir}",
                "--epochs=3",
                f"--step_log={steps_csv}",
            )
            # Epoch 1 is restored, not run again: epochs 2 and 3 remain.
            self.assertEqual(len(self.figures(second, PERPLEXITY)), 2)
            self.assertEqual(len(_step_losses(steps_csv)), 2 * 3)

    def test_rejects_extra_arguments(self):
        with self.assertRaisesRegex(app.UsageError, "Unexpected arguments"):
            self.run_main(argv=("oops",))

    def test_too_small_text_file_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tiny.txt")
            with open(path, "w") as f:
                f.write("a b c\n")
            with self.assertRaisesRegex(ValueError, "too few for 24 windows"):
                self.run_main(f"--data={path}")


class LMTextTest(ExampleMainTestCase):
    example = "lm"

    def test_words_are_ids_by_frequency_with_unk_first(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "text.txt")
            with open(path, "w") as f:
                f.write("b a b\nb c\n")
            ids, words = train.read_text(path, vocab=3)
        self.assertEqual(words, ["<unk>", "b", "<eos>"])
        # "a" and "c" fall outside the 3-word vocabulary.
        self.assertEqual(ids.tolist(), [1, 0, 1, 2, 1, 0, 2])

    def test_perplexity_falls_on_the_generated_corpus(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "corpus.txt")
            corpus.write_corpus(path, sentences=600, seed=0)
            result = train.train(
                train.Config(
                    0, 32, 3, data=path, dim=16, hidden=32, num_sampled=16
                )
            )
        perplexity = result["val_perplexity"]
        # Better than a uniform guess over the vocabulary, and improving.
        self.assertLess(perplexity[0], result["vocab"])
        self.assertLess(perplexity[-1], perplexity[0])


class LMTwoWorkersTest(ExampleMainTestCase):
    example = "lm"
    tiny = (*TINY, "--epochs=2")

    @pytest.mark.multiprocess
    def test_two_workers_match_one_process_step_by_step(self):
        """Same global batch and seed: the sampled candidates, the
        partitioned tables and the dense weights evolve alike, so the
        losses agree step by step."""
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        script = [sys.executable, "-m", "examples.lm.main", *self.tiny]
        launcher = [sys.executable, "-m", "keras_hybrid.run", "-np", "2"]
        with tempfile.TemporaryDirectory() as tmp:
            one, two = (os.path.join(tmp, f"{n}.csv") for n in (1, 2))
            self.run_main(f"--step_log={one}")
            out = subprocess.run(
                [*launcher, "--threads", "1", *script, f"--step_log={two}"],
                capture_output=True,
                text=True,
                timeout=240,
                env=env,
                cwd=ROOT,
            )
            self.assertEqual(out.returncode, 0, out.stderr[-3000:])
            self.assertIn("2 worker(s), vocabulary 200;", out.stderr)
            one, two = _step_losses(one), _step_losses(two)
        self.assertEqual((len(one), len(two)), (6, 6))
        self.assertAllClose(two, one, atol=1e-3)
