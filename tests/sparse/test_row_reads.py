"""`row_reads`: a replicated table that is only gathered reads its rows,
with the same results as Keras' whole read."""

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.sparse import replicated_gathers
from keras_hybrid.testing import TestCase


def _model():
    keras.utils.set_random_seed(3)
    ids = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(50, 4, name="table")(ids)
    x = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(ids, keras.layers.Dense(2)(x))
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    return model


def _data():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=(64, 5)).astype(np.int32)
    return ids, rng.normal(size=(64, 2)).astype(np.float32)


def _op_types(model, ids):
    """Op types of the table's reads in the traced forward pass; a whole
    read that only feeds shape queries (`ops.take` asks for the row
    count, which TF folds to a constant) is named `ShapeOnlyRead`."""
    table = model.get_layer("table").embeddings

    @tf.function
    def forward(x):
        return model(x)

    graph = forward.get_concrete_function(tf.constant(ids)).graph
    handle = table.value.handle
    captured = [inner for outer, inner in graph.captures if outer is handle]
    reads = [
        op
        for op in graph.get_operations()
        if any(t is c for t in op.inputs for c in captured)
    ]
    return sorted(
        "ShapeOnlyRead"
        if op.type == "ReadVariableOp"
        and all(
            user.type in ("Shape", "ShapeN")
            for out in op.outputs
            for user in out.consumers()
        )
        else op.type
        for op in reads
    )


class RowReadsTest(TestCase):
    def test_training_is_unchanged_and_reads_rows_only(self):
        ids, y = _data()
        whole = _model()
        whole.fit(ids, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        rows = _model()
        replicated_gathers.install(rows.get_layer("table").embeddings)
        rows.fit(ids, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        for a, b in zip(whole.get_weights(), rows.get_weights(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        self.assertIn("ReadVariableOp", _op_types(whole, ids))
        self.assertNotIn("ReadVariableOp", _op_types(rows, ids))
        self.assertIn("ResourceGather", _op_types(rows, ids))

    def test_uninstall_reads_whole_again(self):
        ids, _ = _data()
        model = _model()
        table = model.get_layer("table").embeddings
        replicated_gathers.install(table)
        replicated_gathers.uninstall(table)
        self.assertIn("ReadVariableOp", _op_types(model, ids))

    def test_mixed_precision_reads_in_the_compute_dtype(self):
        ids, _ = _data()
        keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            whole, rows = _model(), _model()
            replicated_gathers.install(rows.get_layer("table").embeddings)
            a, b = whole.predict(ids, verbose=0), rows.predict(ids, verbose=0)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        self.assertEqual(a.dtype, b.dtype)
        np.testing.assert_array_equal(a, b)
