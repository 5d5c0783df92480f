"""A partitioned table never becomes a dense [V, D] tensor in training.

On 2 workers the traced train step is searched op by op for a tensor with
the table's full row count (a densified gradient, a whole-table read, a
segment sum over all V rows), and `CommStats` must show per-step traffic
of the rows looked up, far below the table's size. In one process, a
layer that reads a sparse table whole fails at trace time, naming the
table and `variable_kinds`.
"""

import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_hybrid import HybridStrategy
from keras_hybrid.testing import OneProcessTestCase
from keras_hybrid.testing.multiprocess import engines_under_test
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.join(os.path.dirname(__file__), "workers")
SCENARIO = os.path.join(HERE, "stays_sparse_scenarios.py")
sys.path.insert(0, HERE)
import graph_scan  # noqa: E402

V, D = 20000, 16
TABLE_BYTES = V * D * 4
# Ops that may carry the shard's rows: reads of the table itself.
_TABLE_READS = ("ReadVariableOp", "IdentityN")


@pytest.fixture(scope="module", params=engines_under_test())
def two_workers(request):
    run = run_scenario(
        SCENARIO,
        "train_and_scan",
        2,
        {"rows": V, "dim": D, "steps": 6},
        engine=request.param,
        timeout=240,
    ).check()
    assert sorted(run.results) == [0, 1]
    return run.results


@pytest.mark.multiprocess
def test_traced_train_step_has_no_full_table_tensor(two_workers):
    for rank, result in two_workers.items():
        assert "one_step_on_data" in result["graphs"], result["graphs"]
        assert result["num_ops"] > 100, result["num_ops"]
        assert result["full_table_ops"] == [], (
            f"rank {rank}: ops with {V} rows (the whole table) in the "
            f"train step: {result['full_table_ops']}"
        )
        local = result["local_rows_ops"]
        # The walker does see the shard: its reads have the shard's rows.
        assert any(op["type"] == "ReadVariableOp" for op in local), local
        for op in local:
            # Anything else of the shard's size must be dead (pruned when
            # the function runs), not a dense gradient that is used.
            assert op["type"] in _TABLE_READS or not op["used"], (
                f"rank {rank}: shard-sized tensor in the train step: {op}"
            )


@pytest.mark.multiprocess
def test_lookups_do_not_read_the_shard_whole(two_workers):
    # `ops.take` asks for the table's row count in every step (and in the
    # prefetched ids): it gets an empty gather, not a slice of a whole
    # read, which TF copies in full once the shard has been gathered from.
    # Only `custom_gradient`'s IdentityN sees a whole read (pruned at run
    # time: its output for the variable is unused).
    for rank, result in two_workers.items():
        reads = [
            op["op"]
            for op in result["local_rows_ops"]
            if op["type"] == "ReadVariableOp" and op["used"]
        ]
        assert all("IdentityN" in name for name in reads), (rank, reads)


@pytest.mark.multiprocess
def test_each_worker_holds_half_of_the_rows(two_workers):
    total = 0
    for rank, result in two_workers.items():
        assert result["is_sharded_table"], rank
        assert result["path"] == "item/embeddings"
        assert result["full_shape"] == (V, D)
        rows, dim = result["local_shape"]
        assert dim == D
        assert abs(rows - V / 2) <= 1, (rank, rows)
        assert result["rows_on_shards"][rank] == rows
        total += rows
    assert total == V


@pytest.mark.multiprocess
def test_traffic_per_step_is_the_looked_up_rows_not_the_table(two_workers):
    for rank, result in two_workers.items():
        comm, steps = result["comm"], result["steps"]
        # At most every id this worker looked up, once per row (D floats).
        lookup_bytes = result["local_ids_per_step"] * D * 4
        for path in ("sparse_pull", "sparse_push"):
            per_step = comm[path]["bytes"] / steps
            msg = (
                f"rank {rank}: {path} sends {per_step:.0f} B/step; the "
                f"table is {TABLE_BYTES} B, the lookups {lookup_bytes} B"
            )
            assert comm[path]["calls"] == steps, (path, comm[path])
            assert 0 < per_step <= lookup_bytes, msg
            assert per_step < TABLE_BYTES / 100, msg
        for path in ("ids", "padding", "dense", "control"):
            per_step = comm[path]["bytes"] / steps
            assert per_step < TABLE_BYTES / 100, (rank, path, comm[path])
        # Traced once: the steps measured did not retrace.
        assert result["tracing_counts"] == [1, 1], result["tracing_counts"]


class WholeTable(keras.layers.Layer):
    """Scores inputs against every row: needs the whole table."""

    def __init__(self, reduce=False, **kwargs):
        super().__init__(**kwargs)
        self.reduce = reduce

    def build(self, input_shape):
        self.table = self.add_weight(shape=(50, input_shape[-1]), name="table")

    def call(self, x):
        scores = ops.matmul(x, ops.transpose(self.table))
        if self.reduce:
            return ops.sum(scores, axis=-1, keepdims=True)
        return scores


class StaysSparseInProcessTest(OneProcessTestCase):
    def _fit_whole_table(self, reduce):
        strategy = HybridStrategy(
            variable_kinds={"whole_table/table": "sparse"}
        )
        with strategy.scope():
            inputs = keras.Input((8,))
            layer = WholeTable(reduce, name="whole_table")
            model = keras.Model(inputs, layer(inputs))
            model.compile(optimizer="sgd", loss="mse")
        self.assertEqual(strategy.plan["whole_table/table"].kind, "sparse")
        x = np.ones((4, 8), "float32")
        y = np.ones((4, 1 if reduce else 50), "float32")
        with self.assertRaises(ValueError) as caught:
            model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        message = str(caught.exception)
        self.assertIn("'whole_table/table'", message)
        self.assertIn("variable_kinds", message)

    def test_whole_read_of_a_sparse_table_fails_at_trace_time(self):
        # The layer's output shape does not depend on the table's rows.
        self._fit_whole_table(reduce=True)

    def test_whole_read_error_when_the_output_has_the_table_rows(self):
        # `x @ table.T` is [batch, V]: the whole-read error must still be
        # the one raised, not a shape error from what follows the layer.
        self._fit_whole_table(reduce=False)

    def test_the_same_layer_trains_when_its_table_is_dense(self):
        strategy = HybridStrategy()
        with strategy.scope():
            inputs = keras.Input((8,))
            model = keras.Model(inputs, WholeTable(name="whole_table")(inputs))
            model.compile(optimizer="sgd", loss="mse")
        self.assertEqual(strategy.plan["whole_table/table"].kind, "dense")
        history = model.fit(
            np.ones((4, 8), "float32"),
            np.ones((4, 50), "float32"),
            batch_size=4,
            epochs=1,
            verbose=0,
        )
        self.assertTrue(np.isfinite(history.history["loss"]).all())

    def test_the_graph_check_finds_a_densified_gradient(self):
        # The worker's op walker flags what it must: a segment sum over all
        # V rows, whose static shape is [V, D].
        table = tf.Variable(tf.zeros([V, D]))

        @tf.function
        def densify(ids):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.gather(table, ids))
            return tf.convert_to_tensor(tape.gradient(loss, table))

        densify(tf.constant([1, 2, 3]))
        graph = densify.get_concrete_function(tf.constant([1, 2, 3])).graph
        full, _, _ = graph_scan.inspect([graph], V, V // 2)
        types = {op["type"] for op in full}
        self.assertIn("UnsortedSegmentSum", types)

    def test_the_graph_check_finds_a_shard_sized_dense_gradient(self):
        # Inside a traced step a shard's rows are unknown: a tensor built
        # to the shard's size takes its rows from the shard's
        # VariableShape, and the walker lists it with the shard's reads.
        shard = tf.Variable(tf.zeros([V // 2, D]), shape=[None, D])

        @tf.function
        def densify(ids):
            rows = tf.raw_ops.VariableShape(input=shard.handle)
            grad = tf.IndexedSlices(tf.ones([3, D]), ids, rows)
            return tf.convert_to_tensor(grad) + shard.read_value()

        ids = tf.constant([1, 2, 3])
        graph = densify.get_concrete_function(ids).graph
        _, local, _ = graph_scan.inspect([graph], V, V // 2)
        used = {op["type"] for op in local if op["used"]}
        self.assertIn("UnsortedSegmentSum", used)
        self.assertIn("ReadVariableOp", used)
