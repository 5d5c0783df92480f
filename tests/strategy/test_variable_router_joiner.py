"""A table made dense while an elastic joiner traces before admission is
not gathered: the members' group is not the joiner's yet (the gather
failed with "joining a group with size1, but that group has size 2"), and
rank 0 sends every weight and slot when it admits the joiner."""

import types

import numpy as np
import tensorflow as tf

from keras_hybrid.strategy.variable_router import VariableRouter
from keras_hybrid.testing import TestCase


class _Table:
    full_shape = (20, 4)
    dtype = tf.float32

    def __init__(self):
        self.gathered = 0

    def gather_full(self):
        self.gathered += 1
        return np.ones(self.full_shape, np.float32)


def _router(joining):
    membership = None
    if joining is not None:
        membership = types.SimpleNamespace(joining=joining)
    return types.SimpleNamespace(
        _comm=types.SimpleNamespace(membership=membership)
    )


class JoinerDenseTest(TestCase):
    def test_a_joiner_before_admission_does_not_gather(self):
        table = _Table()
        value = VariableRouter._full_value(_router(joining=True), table)
        self.assertEqual(table.gathered, 0)
        np.testing.assert_array_equal(value, np.zeros((20, 4), np.float32))

    def test_members_and_plain_jobs_gather(self):
        for router in (_router(joining=False), _router(joining=None)):
            table = _Table()
            value = VariableRouter._full_value(router, table)
            self.assertEqual(table.gathered, 1)
            np.testing.assert_array_equal(value, np.ones((20, 4), np.float32))
