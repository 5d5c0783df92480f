"""The simulator's resize prediction: rows moved, padding, lower bound,
seconds, and `--resize` on the command line. The prediction is checked
against measured bytes in `tests/sparse/test_resharding_multiprocess.py`."""

import numpy as np

from keras_hybrid.costs import resize
from keras_hybrid.costs.cluster_spec import ClusterSpec
from keras_hybrid.testing import TestCase
from tests.simulate.test_cli import _simulate

TABLE = resize.ResizedTable(100_000, (64,), 4, slots=2)


class ResizeTest(TestCase):
    def test_grow_sends_a_quarter_of_the_table_to_the_new_worker(self):
        (r,) = resize.resize_traffic([TABLE], (3, 4))
        copies_bytes = 3 * 100_000 * 64 * 4  # table, m and v
        self.assertEqual(r.received[:3].tolist(), [0, 0, 0])
        # 256 of 1024 virtual shards, of 97 or 98 rows: about a quarter.
        self.assertAlmostEqual(r.received[3] / copies_bytes, 0.25, delta=0.002)
        self.assertEqual(r.total, r.received.sum())
        self.assertLessEqual(r.ratio, 1.1)
        # Only the pairs that move rows talk, each block at its own ladder
        # step: under 1/16 of padding, and the wire within 1.1x the least.
        self.assertLess(r.padding.sum(), r.total / 16)
        self.assertLessEqual(r.total + r.padding.sum(), 1.1 * r.minimum)
        # The padded all-to-all pads every old worker's two empty blocks to
        # the full block.
        (padded,) = resize.resize_traffic([TABLE], (3, 4), engine="tf_padded")
        np.testing.assert_array_equal(padded.sent, r.sent)
        self.assertTrue((padded.padding[:3] > padded.sent[:3]).all())

    def test_shrink_talks_only_from_the_leaver(self):
        (r,) = resize.resize_traffic([TABLE], (8, 7))
        self.assertEqual(np.count_nonzero(r.sent), 1)
        self.assertEqual(np.count_nonzero(r.padding), 1)
        self.assertLessEqual(r.total + r.padding.sum(), 1.1 * r.minimum)

    def test_exact_engine_has_no_padding_and_the_same_rows(self):
        (padded,) = resize.resize_traffic([TABLE], (8, 7), engine="tf_padded")
        (exact,) = resize.resize_traffic([TABLE], (8, 7), engine="exact")
        np.testing.assert_array_equal(padded.sent, exact.sent)
        self.assertEqual(exact.padding.sum(), 0)
        # Only the leaving worker sends, 1/8 of the table.
        self.assertEqual(np.count_nonzero(exact.sent), 1)
        self.assertEqual(exact.ratio, 1.0)
        spec = ClusterSpec(8, 1, 1.25e9, 0.0, 1e10, 0.0)
        self.assertLess(exact.seconds(spec), padded.seconds(spec))

    def test_chain_and_bad_arguments(self):
        results = resize.resize_traffic([TABLE], (2, 4, 3))
        self.assertEqual([(r.old, r.new) for r in results], [(2, 4), (4, 3)])
        with self.assertRaisesRegex(ValueError, "at least two worker counts"):
            resize.resize_traffic([TABLE], (3,))
        with self.assertRaisesRegex(ValueError, "`engine` must be one of"):
            resize.resize_traffic([TABLE], (3, 4), engine="nccl")

    def test_command_line(self):
        run = _simulate(
            "--resize=3:4:8:7",
            "--resize_tables=100000x128",
            "--resize_slots=2",
            "--bandwidth=10gbit",
        )
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        rows = [line.split() for line in run.stdout.splitlines()]
        resizes = [r[0] for r in rows if r and "->" in r[0]]
        self.assertEqual(resizes, ["3->4", "4->8", "8->7"])
        bad = _simulate("--resize=3:4", "--resize_tables=big")
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("ROWSxDIM", bad.stderr)
