"""The mode registry: names, errors, and modes that cannot run here."""

import importlib.util
import unittest

from keras_hybrid.benchmark import modes


class ModesTest(unittest.TestCase):
    def test_registry_and_order(self):
        self.assertEqual(
            modes.names()[:5],
            ("hybrid", "allgather", "dense", "ps_only", "horovod"),
        )
        chosen = modes.resolve(["dense", "hybrid"])
        self.assertEqual([m.name for m in chosen], ["dense", "hybrid"])
        self.assertEqual(
            dict(modes.get("dense").strategy_kwargs),
            {"variable_kinds": {".*": "dense"}, "indexed_slices": "densify"},
        )

    def test_only_hybrid_hot_takes_hot_rows(self):
        self.assertTrue(modes.get("hybrid_hot").hot_rows)
        self.assertEqual(
            [m for m in modes.names() if modes.get(m).hot_rows],
            ["hybrid_hot"],
        )

    def test_bad_lists(self):
        with self.assertRaisesRegex(ValueError, "Received: 'nccl'"):
            modes.resolve(["hybrid", "nccl"])
        with self.assertRaisesRegex(ValueError, "repeated"):
            modes.resolve(["hybrid", "hybrid"])
        with self.assertRaisesRegex(ValueError, "at least one"):
            modes.resolve([])

    def test_ps_only_is_left_out_with_a_reason(self):
        (mode,) = modes.resolve(["ps_only"])
        self.assertIn("not implemented", mode.skip_reason)

    def test_horovod_needs_horovod_and_says_how_to_get_it(self):
        if importlib.util.find_spec("horovod") is not None:
            with self.assertRaisesRegex(RuntimeError, "horovod_comparison"):
                modes.resolve(["horovod"])
            return
        with self.assertRaisesRegex(RuntimeError, "2.15.1.*horovod==0.28.1"):
            modes.resolve(["hybrid", "horovod"])
