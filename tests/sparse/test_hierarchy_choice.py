"""`hierarchy_choice`: the cost model's verdict on the hierarchical
exchange, under uniform ids."""

import math

from keras_hybrid import Link
from keras_hybrid.comm import host_groups
from keras_hybrid.sparse import hierarchical_choice
from keras_hybrid.testing import TestCase

HOSTS, _ = host_groups.from_hosts(["a", "a", "b", "b"])


def _stats(rows, width, lookups):
    return [
        hierarchical_choice.table_stats("t", (rows, width), 4, [lookups], 2)
    ]


class UniformUniqueTest(TestCase):
    def test_by_hand(self):
        self.assertEqual(hierarchical_choice.uniform_unique(500, 0), 0.0)
        self.assertAlmostEqual(hierarchical_choice.uniform_unique(500, 1), 1.0)
        # 2 draws of 2 rows: 1 + 1/2 unique rows on average.
        self.assertAlmostEqual(hierarchical_choice.uniform_unique(2, 2), 1.5)
        self.assertAlmostEqual(
            hierarchical_choice.uniform_unique(10, 1000), 10.0, places=6
        )

    def test_host_batch_shares_ids(self):
        (stats,) = _stats(1000, 8, 500)
        self.assertAlmostEqual(
            stats.unique_ids(2), 1000 * -math.expm1(1000 * math.log1p(-1e-3))
        )
        self.assertLess(stats.unique_ids(2), 2 * stats.unique_ids(1))


class PaysTest(TestCase):
    def test_pays_where_a_host_shares_ids(self):
        # 8192 uniform lookups of 1000 rows: the two workers of a host
        # touch nearly the same rows, so each crosses hosts once.
        stats = _stats(1000, 64, 8192)
        link = Link(bandwidth="100mbit")
        self.assertTrue(hierarchical_choice.pays(stats, HOSTS, link))
        flat = hierarchical_choice.step_seconds(stats, HOSTS, link, False)
        hier = hierarchical_choice.step_seconds(stats, HOSTS, link, True)
        self.assertLess(hier, 0.6 * flat)

    def test_does_not_pay_without_shared_ids_on_a_slow_link(self):
        # 10^7 rows: uniform batches share almost nothing, and the in-host
        # stage only adds time.
        stats = _stats(10**7, 64, 8192)
        link = Link(bandwidth="100mbit")
        self.assertFalse(hierarchical_choice.pays(stats, HOSTS, link))

    def test_a_small_predicted_gain_is_not_enough(self):
        # The benchmark's lm at 20 000 rows, 32 sequences per worker: the
        # model predicts a few percent, within what it leaves out.
        stats = [
            hierarchical_choice.table_stats("in", (20000, 64), 4, [640], 2),
            hierarchical_choice.table_stats(
                "out", (20000, 128), 4, [640, 2048], 2
            ),
        ]
        link = Link(bandwidth="100mbit", latency=0)
        flat, hier, pays = hierarchical_choice.verdict(stats, HOSTS, link)
        self.assertLess(hier, flat)
        self.assertGreater(hier, (1 - hierarchical_choice.MARGIN) * flat)
        self.assertFalse(pays)
