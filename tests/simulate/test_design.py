"""The simulator's exchange design options, by hand.

Plain `unittest.TestCase`: nothing here builds Keras objects. Each option
is checked against figures worked out by hand or against the same step
with the option off.
"""

import dataclasses
import math
import unittest

import numpy as np

from keras_hybrid.costs import cost_model
from keras_hybrid.costs import hot_row_savings
from keras_hybrid.costs import table_draws
from keras_hybrid.costs import table_exchange
from keras_hybrid.costs import traffic
from keras_hybrid.costs.cluster_spec import ClusterSpec
from keras_hybrid.costs.design import Design
from keras_hybrid.costs.profile import Profile
from keras_hybrid.costs.profile import VariableStats
from keras_hybrid.simulate import parallax
from keras_hybrid.simulate import validate

ROWS, DIM = 100_000, 64
ROW_BYTES = 4 * DIM


def _table(path="emb", unique=(100.0, 180.0, 320.0), calls=1):
    return VariableStats(
        path=path,
        kind="sparse",
        shape=(ROWS, DIM),
        dtype_bytes=4,
        index_bytes=8,
        lookups_per_sample=(20.0,) * calls,
        batch_sizes=(8, 16, 32),
        unique=(tuple(unique),) * calls,
    )


def _profile(*tables):
    tables = tables or (_table(),)
    dense = VariableStats("kernel", "dense", (256, 256), 4)
    return Profile("toy", (*tables, dense), (8, 16, 32), (0.01, 0.02, 0.04))


def _sparse(prediction):
    return sum(
        prediction.bytes[p]
        for p in ("ids", "sparse_pull", "sparse_push", "padding")
    )


class DesignTest(unittest.TestCase):
    def test_defaults_are_the_default_exchange(self):
        self.assertTrue(Design().is_default)
        self.assertTrue(Design(fused=True).is_default)
        self.assertFalse(Design(fused=False).is_default)
        self.assertIn("per lookup", Design(fused=False).describe())
        self.assertIn("as built", Design().describe())
        self.assertIn("not built", Design.all_options().describe())

    def test_rejects_bad_options(self):
        with self.assertRaisesRegex(ValueError, "padding.*Received"):
            Design(padding="none")
        with self.assertRaisesRegex(ValueError, "hot_rows.*-1"):
            Design(hot_rows=-1)
        with self.assertRaisesRegex(TypeError, "hot_rows"):
            Design(hot_rows=1.5)
        with self.assertRaisesRegex(ValueError, "zipf"):
            Design(zipf=0)

    def test_default_design_is_hybrid_table(self):
        profile = _profile()
        today = traffic.step_exchanges(profile, "hybrid", 8, 32)
        explicit = traffic.step_exchanges(
            profile, "hybrid", 8, 32, design=Design(), per_host=4
        )
        self.assertEqual(today, explicit)
        self.assertEqual(
            today[:4], table_exchange.hybrid_table(profile.variables[0], 8, 32)
        )


class PaddingTest(unittest.TestCase):
    """Padding, on one count matrix worked out by hand."""

    # C[i, j]: ids worker i asks worker j for. The ladder is exact up to
    # 64 for even counts and gives 68 for 67.
    COUNTS = np.array([[[5, 67, 1], [2, 0, 3], [1, 1, 9]]])

    def _stage(self, padding, pull=False):
        peer = 1 - np.eye(3, dtype=np.int64)
        return table_draws.stage_bytes(self.COUNTS, pull, padding, peer)

    def test_max_pair_pads_every_block_to_the_largest(self):
        sent, padded, recv = self._stage("max_pair")
        np.testing.assert_array_equal(sent, [[68, 5, 2]])
        np.testing.assert_array_equal(padded, [[136, 136, 136]])
        np.testing.assert_array_equal(recv, [[136, 136, 136]])

    def test_per_pair_pads_each_block_to_its_own_step(self):
        sent, padded, recv = self._stage("per_pair")
        np.testing.assert_array_equal(padded, [[69, 5, 2]])  # 68 + 1
        np.testing.assert_array_equal(recv, [[3, 69, 4]])
        np.testing.assert_array_equal(sent, [[68, 5, 2]])

    def test_exact_sends_no_padding_and_pull_reverses(self):
        sent, padded, recv = self._stage("exact")
        np.testing.assert_array_equal(padded, sent)
        sent, padded, recv = self._stage("exact", pull=True)
        # Worker j serves the rows i asked it for.
        np.testing.assert_array_equal(sent, [[3, 68, 4]])
        np.testing.assert_array_equal(recv, [[68, 5, 2]])

    def test_padding_share_falls_with_per_pair_and_exact(self):
        profile = _profile()
        spec = ClusterSpec(64, 8, inter_latency=5e-6)
        shares = {}
        for padding in ("max_pair", "per_pair", "exact"):
            p = cost_model.predict(
                profile, "hybrid", spec, 32, design=Design(padding)
            )
            shares[padding] = p.bytes["padding"] / _sparse(p)
        self.assertGreater(shares["max_pair"], 0.3)
        self.assertLess(shares["per_pair"], 0.05)
        self.assertEqual(shares["exact"], 0.0)


class FusedTest(unittest.TestCase):
    """The fused exchange: the same bytes in 4 collectives a step instead
    of 4 per table and call."""

    def test_same_payload_fewer_exchanges_less_latency(self):
        profile = _profile(_table("a"), _table("b"), _table("c"))
        spec = ClusterSpec(32, 8, inter_latency=5e-6)
        apart = Design("exact", fused=False)
        fused = Design("exact", fused=True)
        ex_apart = traffic.step_exchanges(
            profile, "hybrid", 32, 32, design=apart
        )
        ex_fused = traffic.step_exchanges(
            profile, "hybrid", 32, 32, design=fused
        )
        to_all = [e for e in ex_apart if e.kind == "all_to_all"]
        self.assertEqual(len(to_all), 3 * 4)
        self.assertEqual(
            len([e for e in ex_fused if e.kind == "all_to_all"]), 4
        )
        a = traffic.bytes_per_path(ex_apart)
        b = traffic.bytes_per_path(ex_fused)
        for path in ("ids", "sparse_pull", "sparse_push", "padding"):
            self.assertAlmostEqual(a[path], b[path], delta=1e-6 * a[path] + 1)
        pa = cost_model.predict(profile, "hybrid", spec, 32, design=apart)
        pf = cost_model.predict(profile, "hybrid", spec, 32, design=fused)
        # 8 fewer all-to-alls of 7 in-host and 24 cross-host rounds.
        self.assertAlmostEqual(
            pa.latency_seconds - pf.latency_seconds,
            8 * (7 * 5e-6 + 24 * 5e-6),
            places=9,
        )


class HierarchicalTest(unittest.TestCase):
    """The hierarchical exchange."""

    def test_shared_ids_cross_hosts_once(self):
        # Heaps' beta = 0: a host's 4 workers look up the same 300 ids,
        # so the host's unique ids are a worker's.
        profile = _profile(_table(unique=(300.0, 300.0, 300.0)))
        spec = ClusterSpec(16, 4)
        flat = cost_model.predict(
            profile, "hybrid", spec, 32, design=Design("exact")
        )
        tiered = cost_model.predict(
            profile, "hybrid", spec, 32, design=Design("exact", False, True)
        )
        ratio = flat.cross_host_sparse_bytes / tiered.cross_host_sparse_bytes
        self.assertAlmostEqual(ratio, 4.0, delta=0.4)

    def test_distinct_ids_save_nothing_across_hosts(self):
        # All lookups distinct (beta = 1): no dedupe within a host.
        profile = _profile(_table(unique=(160.0, 320.0, 640.0)))
        spec = ClusterSpec(16, 4)
        flat, tiered = (
            cost_model.predict(
                profile, "hybrid", spec, 32, design=Design("exact", False, h)
            )
            for h in (False, True)
        )
        ratio = flat.cross_host_sparse_bytes / tiered.cross_host_sparse_bytes
        self.assertAlmostEqual(ratio, 1.0, delta=0.1)

    def test_one_worker_per_host_is_flat(self):
        profile = _profile()
        flat = traffic.step_exchanges(
            profile, "hybrid", 8, 32, design=Design("exact"), per_host=1
        )
        tiered = traffic.step_exchanges(
            profile,
            "hybrid",
            8,
            32,
            design=Design("exact", hierarchical=True),
            per_host=1,
        )
        self.assertEqual(flat, tiered)

    def test_two_level_all_reduce_by_hand(self):
        spec = ClusterSpec(
            32,
            8,
            inter_bandwidth=1e9,
            inter_latency=1e-4,
            intra_bandwidth=1e10,
            intra_latency=1e-6,
        )
        d = 8e6
        e = traffic.hierarchical_all_reduce(d, 8, 4)
        self.assertAlmostEqual(e.bytes["dense"], 2 * 7 * d / 8 + 2 * 3 * d / 32)
        two_level = 2 * 7 * (1e-6 + d / 8 / 1e10) + 2 * 3 * (1e-4 + d / 4 / 1e9)
        flat = 2 * 31 * (1e-4 + d / 32 / 1e9)
        self.assertLess(two_level, flat)
        self.assertAlmostEqual(
            cost_model.exchange_seconds(e, spec), two_level, places=12
        )
        # Where the flat ring is faster (bandwidth-bound, slow in-host
        # link), it is used.
        slow = dataclasses.replace(
            spec, intra_bandwidth=1e8, inter_bandwidth=1e8
        )
        self.assertAlmostEqual(
            cost_model.exchange_seconds(e, slow),
            2 * 31 * (1e-4 + d / 32 / 1e8),  # < 2 * 7 * 0.01 + 2 * 3 * 0.02
            places=12,
        )


class HotRowsTest(unittest.TestCase):
    """Hot rows."""

    def test_cold_fraction_by_hand(self):
        # Two rows, p = (2/3, 1/3) for zipf 1; one lookup: E[unique] = 1,
        # the cold row is drawn with probability 1/3.
        self.assertAlmostEqual(
            hot_row_savings.cold_fraction(2, 1.0, 1, 1), 1 / 3
        )
        self.assertEqual(hot_row_savings.cold_fraction(1000, 1.2, 640, 0), 1.0)
        self.assertEqual(
            hot_row_savings.cold_fraction(1000, 1.2, 640, 1000), 0.0
        )
        fractions = [
            hot_row_savings.cold_fraction(200_000, 1.2, 640, h)
            for h in (16, 256, 4096)
        ]
        self.assertEqual(fractions, sorted(fractions, reverse=True))

    def test_hot_rows_move_bytes_to_the_all_reduce(self):
        profile = _profile()
        base = traffic.bytes_per_path(
            traffic.step_exchanges(profile, "hybrid", 8, 32)
        )
        hot = traffic.bytes_per_path(
            traffic.step_exchanges(
                profile, "hybrid", 8, 32, design=Design(hot_rows=512)
            )
        )
        # As built, their values (forward) and gradients (backward) are
        # all-reduced: 2 (N - 1) / N of them, twice.
        extra = 2 * 2 * 7 * (512 * ROW_BYTES) / 8
        self.assertAlmostEqual(hot["dense"] - base["dense"], extra, delta=1)
        self.assertLess(hot["sparse_pull"], base["sparse_pull"])

    def test_shard_load_on_zipf_1_2_at_8_workers(self):
        # Hot rows at 8 workers, Zipf(1.2), lm-like batches of 640
        # lookups over 200 000 rows. Workers dedupe their ids, so a hot id
        # costs its shard one row per worker: the busiest shard stays
        # within 1.25x the mean with or without hot rows, and hot rows
        # cut the rows served.
        base = hot_row_savings.shard_load(200_000, 1.2, 640, 8, draws=4)
        hot = hot_row_savings.shard_load(
            200_000, 1.2, 640, 8, hot=1024, draws=4
        )
        self.assertLessEqual(base["max_over_mean"], 1.25)
        self.assertLessEqual(hot["max_over_mean"], 1.25)
        self.assertGreater(base["max_over_mean"], 1.0)
        self.assertLess(hot["mean_rows"], 0.8 * base["mean_rows"])


class ParallaxTest(unittest.TestCase):
    def test_parameter_counts_of_the_papers_models(self):
        lm = parallax.lm_profile()
        dense = sum(math.prod(v.shape) for v in lm.of_kind("dense"))
        sparse = sum(math.prod(v.shape) for v in lm.of_kind("sparse"))
        self.assertEqual(dense, 1024 * 8192 + 8192 + 2048 * 512)
        self.assertEqual(sparse, 793_470 * (512 + 512 + 1))
        nmt = parallax.nmt_profile()
        sparse = sum(math.prod(v.shape) for v in nmt.of_kind("sparse"))
        self.assertEqual(sparse, 2 * 36_548 * 1024)

    def test_zipf_unique_by_hand(self):
        # Two ids, p = (2/3, 1/3), two draws: (1 - 1/9) + (1 - 4/9).
        self.assertAlmostEqual(parallax.zipf_unique(2, 2, 1.0), 13 / 9)


if __name__ == "__main__":
    unittest.main()


class ValidateDesignTest(unittest.TestCase):
    def test_hybrid_padded_is_compared_with_max_pair_padding(self):
        profile = _profile()
        sent = {"ids": 1.0, "padding": 1.0}
        results = [
            {"mode": m, "bytes_per_step": sent, "step_time_ms": {"median": 9}}
            for m in ("hybrid", "hybrid_padded")
        ]
        measured = {"workers": 8, "netem": "20mbit:0", "results": results}
        checks = validate.compare(
            profile, measured, 32, design=Design("per_pair")
        )
        by_mode = {c["mode"]: c["predicted_bytes"] for c in checks}
        spec = validate.spec_of(measured)
        for mode, padding in (
            ("hybrid", "per_pair"),
            ("hybrid_padded", "max_pair"),
        ):
            p = cost_model.predict(
                profile, "hybrid", spec, 32, design=Design(padding)
            )
            self.assertAlmostEqual(
                by_mode[mode], sum(p.bytes[k] for k in validate.COMPARED_PATHS)
            )
        self.assertLess(by_mode["hybrid"], by_mode["hybrid_padded"])
