"""The nmt, recommender and dense_cnn examples: `main()` with tiny flags,
their `--data` formats, and their errors."""

import os
import tempfile

import numpy as np
from absl import app

from examples.dense_cnn import train as dense_cnn
from examples.nmt import train as nmt
from examples.recommender import train as recommender
from keras_hybrid.testing import plan_text
from tests.examples.main_test_case import ExampleMainTestCase

COMMON = ("--steps=3", "--batch_size=8", "--epochs=2")


class NMTMainTest(ExampleMainTestCase):
    example = "nmt"
    tiny = (*COMMON, "--vocab=50", "--seq_len=4", "--dim=8", "--hidden=8")

    def test_synthetic_pairs_train_and_report_accuracy(self):
        log = self.run_main()
        accuracy = self.figures(log, "held-out token accuracy per epoch:")
        self.assertEqual(len(accuracy), 2)
        self.assertTrue(all(0 <= a <= 1 for a in accuracy))
        self.assertIn("source_embedding/embeddings", log)

    def test_targets_are_the_reversed_dictionary_translation(self):
        source, target = nmt.synthetic_pairs(5, 50, 4, seed=0)
        self.assertTrue(np.all(source >= len(nmt.RESERVED)))
        # The same source word always maps to the same target word.
        pairs = set(zip(source.ravel(), target[:, ::-1].ravel(), strict=True))
        self.assertEqual(len(pairs), len(np.unique(source)))

    def test_tab_separated_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "pairs.tsv")
            with open(path, "w") as f:
                f.write("a b c\tx y\n" * 40)
            log = self.run_main(f"--data={path}", "--steps=0")
            self.assertIn("1 worker(s)", log)
            source, target = nmt.read_pairs(path, 50, 4)
        self.assertEqual(source[0].tolist(), [3, 4, 5, nmt.PAD])
        self.assertEqual(target[0].tolist(), [3, 4, nmt.PAD, nmt.PAD])

    def test_line_without_a_tab_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.tsv")
            with open(path, "w") as f:
                f.write("a b\tc\nno tab here\n")
            with self.assertRaisesRegex(ValueError, "1 fields on line 2"):
                self.run_main(f"--data={path}")

    def test_rejects_extra_arguments(self):
        with self.assertRaisesRegex(app.UsageError, "Unexpected arguments"):
            self.run_main(argv=("oops",))


class RecommenderMainTest(ExampleMainTestCase):
    example = "recommender"
    tiny = (*COMMON, "--vocab_sizes=300,40,5", "--num_dense=3", "--dim=4")

    def test_synthetic_clicks_train_and_report_auc(self):
        log = self.run_main()
        auc = self.figures(log, "held-out AUC per epoch:")
        self.assertEqual(len(auc), 2)
        self.assertTrue(all(0 <= a <= 1 for a in auc))
        # One worker: the plan lists each table, kept dense (nothing to
        # partition over), with the reason.
        for table in ("table_0", "table_1", "table_2"):
            block = plan_text.entry(log, f"{table}/embeddings")
            self.assertTrue(block.startswith("dense"), block)
            self.assertIn("cannot pay on 1 workers", block)

    def test_interaction_is_the_upper_triangle_of_dot_products(self):
        a, b, c = (
            np.array([[1.0, 2.0]]),
            np.array([[3.0, 4.0]]),
            np.ones((1, 2)),
        )
        dots = recommender.DotInteraction()([a, b, c])
        self.assertAllClose(dots, [[11.0, 3.0, 7.0]])

    def test_csv_file_ids_hashed_into_their_tables(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "clicks.csv")
            with open(path, "w") as f:
                f.write("1,0.5,0.1,0.2,301,7,12\n0,0.1,0.1,0.2,2,45,1\n" * 20)
            log = self.run_main(f"--data={path}", "--steps=0")
            self.assertIn("1 worker(s)", log)
            x, y = recommender.read_clicks(path, 3, (300, 40, 5))
        self.assertEqual(x["ids"][0].tolist(), [1, 7, 2])
        self.assertEqual(x["ids"][1].tolist(), [2, 5, 1])
        self.assertEqual(y[:2, 0].tolist(), [1.0, 0.0])

    def test_wrong_column_count_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.csv")
            with open(path, "w") as f:
                f.write("1,0.5,3\n")
            with self.assertRaisesRegex(ValueError, "Received: 3 in"):
                self.run_main(f"--data={path}")

    def test_bad_vocab_sizes_is_a_usage_error(self):
        with self.assertRaisesRegex(app.UsageError, "--vocab_sizes=10,x"):
            self.run_main("--vocab_sizes=10,x")


class DenseCNNMainTest(ExampleMainTestCase):
    example = "dense_cnn"
    tiny = COMMON

    def test_synthetic_images_train_with_no_sparse_variable(self):
        log = self.run_main()
        accuracy = self.figures(log, "held-out accuracy per epoch:")
        self.assertEqual(len(accuracy), 2)
        self.assertNotRegex(log, r"(?m)^\S+ +sparse ")
        result = dense_cnn.train(dense_cnn.Config(2, 8, 1))
        self.assertEqual(result["sparse"], 0)

    def test_npz_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "images.npz")
            x = np.random.default_rng(0).normal(size=(40, 12, 12, 3))
            np.savez(path, x=x, y=np.arange(40) % 4)
            log = self.run_main(f"--data={path}", "--steps=0")
        self.assertIn("1 worker(s)", log)
        self.assertRegex(
            plan_text.entry(log, "sequential/dense_1/kernel"), r"^dense\s+64x4"
        )

    def test_npz_without_labels_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "images.npz")
            np.savez(path, x=np.zeros((4, 8, 8, 1)))
            with self.assertRaisesRegex(ValueError, r"Received arrays \['x'\]"):
                self.run_main(f"--data={path}")

    def test_rejects_extra_arguments(self):
        with self.assertRaisesRegex(app.UsageError, "Unexpected arguments"):
            self.run_main(argv=("oops",))
