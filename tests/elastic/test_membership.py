"""`ElasticMembership.pair_group_key`: the group key of two members' row
moves is unique per generation and pair of tasks, the same from both
ends, and clear of every other group key of the job."""

import itertools
import tempfile

from keras_hybrid.contract import elastic_board
from keras_hybrid.elastic.membership import ElasticMembership
from keras_hybrid.testing import TestCase


def _membership(task, members, max_np=8):
    return ElasticMembership(task, tempfile.gettempdir(), members, 2, max_np)


class PairGroupKeyTest(TestCase):
    def test_unique_per_generation_and_pair_and_symmetric(self):
        members = [0, 2, 3, 5, 7]
        m = _membership(0, members)
        keys = {}
        for generation in range(4):
            m.switch(generation, members)
            for a, b in itertools.combinations(range(len(members)), 2):
                key = m.pair_group_key(a, b)
                self.assertEqual(key, m.pair_group_key(b, a))
                pair = (generation, members[a], members[b])
                self.assertNotIn(key, keys, (pair, keys.get(key)))
                keys[key] = pair
        # Task 3 and 5 in generation 1 by hand: 2**26 + (1 * 8 + 3) * 8 + 5.
        self.assertEqual(keys[(1 << 26) + 93], (1, 3, 5))
        # Above the other ranges: elastic groups, state groups, the pair
        # groups of a fixed job.
        self.assertGreater(min(keys), (1 << 24) + 4096 * 4096)
        self.assertGreater(min(keys), elastic_board.STATE_GROUP_KEY_BASE)

    def test_a_pair_keeps_its_key_across_renumbering_in_one_generation(self):
        # The ranks of tasks 3 and 5 differ in the two member lists.
        a = _membership(3, [0, 3, 5])
        b = _membership(3, [0, 1, 3, 5])
        a.switch(2, [0, 3, 5])
        b.switch(2, [0, 1, 3, 5])
        self.assertEqual(a.pair_group_key(1, 2), b.pair_group_key(2, 3))

    def test_errors(self):
        m = _membership(0, [0, 1, 2])
        with self.assertRaisesRegex(ValueError, "must both be ranks"):
            m.pair_group_key(0, 3)
        m.switch(1 << 30, [0, 1, 2])
        with self.assertRaisesRegex(ValueError, "no pair group key left"):
            m.pair_group_key(0, 1)
