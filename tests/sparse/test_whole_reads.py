"""Whole reads of a partitioned table traced in a graph: in a step, named
by `check_whole_reads`, and never keeping the graph alive; outside one,
an error at once."""

import gc
import weakref

import numpy as np
import tensorflow as tf

from keras_hybrid.comm import make_communicator
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.sparse import sharded_table
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing import TestCase


class WholeReadsTest(TestCase):
    def setUp(self):
        super().setUp()
        comm = make_communicator("tf", 0, 1, 10.0, 1024)
        self.table = ShardedTable(
            path="items/embeddings",
            full_shape=(8, 2),
            partition=RowPartition.create(8, 1),
            communicator=comm,
            role="table",
            initial_value=np.zeros((8, 2), "float32"),
            shape=tf.TensorShape([None, 2]),
        )

    def _trace(self, fn):
        """The graph of `fn` traced as a strategy step traces it."""
        with sharded_table.step_trace():
            return tf.function(fn).get_concrete_function().graph

    def test_a_whole_read_outside_a_step_raises_when_traced(self):
        table = self.table
        with self.assertRaisesRegex(
            ValueError, "'items/embeddings' was read whole inside a "
        ):
            tf.function(
                lambda: tf.reduce_sum(tf.convert_to_tensor(table))
            ).get_concrete_function()

    def test_a_whole_read_used_as_a_value_names_the_table(self):
        table = self.table
        graph = self._trace(lambda: tf.reduce_sum(tf.convert_to_tensor(table)))
        with self.assertRaisesRegex(
            ValueError,
            r"Partitioned table 'items/embeddings' was read as a whole "
            r"tensor by op .*\(Sum\)",
        ):
            sharded_table.check_whole_reads(graph)

    def test_a_shape_query_passes(self):
        table = self.table
        graph = self._trace(lambda: tf.shape(tf.convert_to_tensor(table)))
        sharded_table.check_whole_reads(graph)

    def test_an_unchecked_graph_is_collected(self):
        # A scratch trace (prefetch's, placement's) is never checked: its
        # record must not keep the graph, and its tensors, alive.
        table = self.table
        graph = weakref.ref(
            self._trace(lambda: tf.reduce_sum(tf.convert_to_tensor(table)))
        )
        gc.collect()
        self.assertIsNone(graph())
