"""An error raised inside the strategy's exchange of a partitioned table
names the table and the strategy, also after Keras re-raises it with a
layer's name."""

from unittest import mock

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.comm import make_communicator
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing import TestCase


class ExchangeErrorTest(TestCase):
    def setUp(self):
        super().setUp()
        self.comm = make_communicator("tf", 0, 1, 10.0, 1024)
        part = RowPartition.create(8, 1)
        self.table = ShardedTable(
            path="items/embeddings",
            full_shape=(8, 2),
            partition=part,
            communicator=self.comm,
            role="table",
            initial_value=np.zeros((8, 2), "float32"),
            shape=tf.TensorShape([None, 2]),
        )

    def test_the_message_names_the_table_and_the_strategy(self):
        broken = mock.patch.object(
            type(self.comm),
            "plan_exchange",
            side_effect=ValueError("counts do not add up"),
        )
        with (
            broken,
            self.assertRaisesRegex(
                ValueError,
                r"counts do not add up\n\(keras-hybrid: raised in "
                r"HybridStrategy's exchange of the rows of partitioned table "
                r"'items/embeddings', 8 rows over 1 workers, on worker 0\.\)",
            ),
        ):
            self.table.sparse_read(tf.constant([1, 2]))

    def test_keras_keeps_the_words_when_it_names_the_layer(self):
        table = self.table

        class Lookup(keras.layers.Layer):
            def call(self, ids):
                return table.sparse_read(ids)

        broken = mock.patch.object(
            type(self.comm), "plan_exchange", side_effect=TypeError("boom")
        )
        with broken, self.assertRaisesRegex(TypeError, "Lookup.call") as ctx:
            Lookup()(tf.constant([1, 2]))
        self.assertIn(
            "partitioned table 'items/embeddings'", str(ctx.exception)
        )

    def test_an_error_without_a_message_gets_a_note(self):
        broken = mock.patch.object(
            type(self.comm), "plan_exchange", side_effect=KeyError()
        )
        with broken, self.assertRaises(KeyError) as ctx:
            self.table.sparse_read(tf.constant([1]))
        self.assertIn("items/embeddings", "".join(ctx.exception.__notes__))
