"""How a replicated variable's `IndexedSlices` gradient is summed does not
depend on the size an elastic process traced at.

A keras-rs DCN script (a 20-row genre table kept replicated) hung at a
4 -> 3 shrink: the members had traced at 2 and 4 workers, a joiner at
--max-np; they chose differently between all-gather and all-reduce, so
at 3 the members traced the step again and the joiner did not.
"""

import types

import tensorflow as tf

from keras_hybrid.plan import cost_rule
from keras_hybrid.strategy.hybrid_extended import HybridExtended
from keras_hybrid.testing import TestCase


def _choice(size, width):
    extended = types.SimpleNamespace(
        _indexed_slices=None,
        _communicator=types.SimpleNamespace(size=size, width=width),
        _link=cost_rule.Link(),
    )
    # 32 lookups of a 2000 x 32 table: the cost rule gathers them on 2
    # workers and all-reduces the table on 3 or 4.
    grad = tf.IndexedSlices(
        tf.zeros([32, 32]),
        tf.zeros([32], tf.int64),
        dense_shape=tf.constant([2000, 32], tf.int64),
    )
    return HybridExtended._sync_of(extended, grad)


class IndexedSlicesChoiceTest(TestCase):
    def test_the_choice_follows_the_most_workers_not_the_size(self):
        at_max = _choice(size=4, width=4)
        for size in (2, 3, 4):
            self.assertEqual(_choice(size=size, width=4), at_max)

    def test_a_fixed_job_chooses_for_its_size(self):
        self.assertEqual(_choice(size=2, width=2), "allgather_unique")
        self.assertEqual(_choice(size=4, width=4), "allreduce")
