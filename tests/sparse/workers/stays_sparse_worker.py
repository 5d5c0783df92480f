"""Worker: trains an Embedding model, then inspects its traced train step.

Run by `tests/sparse/test_sparse_stays_sparse.py` through
`keras-hybrid-run`. It saves, per rank, every op of the traced train
function (and of the functions nested in it) whose output has the table's
full row count as static first dimension, or that builds a tensor of the
full table's shape; the ops that touch the shard's own row count; the
`CommStats` delta of a few more steps; and the shard's shape.
"""

import keras
import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_integer("rows", 20000, "Rows V of the embedding table.")
flags.DEFINE_integer("dim", 16, "Row width D of the embedding table.")
flags.DEFINE_integer("batch", 64, "Global batch size.")
flags.DEFINE_integer("ids_per_sample", 5, "Ids looked up per sample.")
flags.DEFINE_integer("steps", 6, "Steps measured after tracing.")

# Ops that build a tensor whose shape is given by an input (not by the
# shapes of their inputs): one with the table's full shape is a dense
# table, even where its static output shape is unknown.
_SHAPE_INPUT = {
    "UnsortedSegmentSum": 2,
    "UnsortedSegmentMax": 2,
    "UnsortedSegmentMin": 2,
    "UnsortedSegmentProd": 2,
    "ScatterNd": 2,
    "SparseToDense": 1,
    "Fill": 0,
    "BroadcastTo": 1,
    "Zeros": 0,
}


def _tf_functions(obj, seen=None):
    """Every `tf.function` reachable from `obj` through closures."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    found = []
    if isinstance(obj, tf.types.experimental.PolymorphicFunction):
        found.append(obj)
        obj = obj.python_function
    for cell in getattr(obj, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # empty cell
            continue
        if callable(value):
            found += _tf_functions(value, seen)
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None:
        found += _tf_functions(wrapped, seen)
    return found


def _graphs(model):
    """The graphs of the traced train function and all nested functions."""
    functions = _tf_functions(model.train_function)
    if not functions:
        raise AssertionError("no tf.function found in model.train_function")
    pending = [
        concrete.graph
        for function in functions
        for concrete in function._list_all_concrete_functions()
    ]
    graphs, seen = [], set()
    while pending:
        graph = pending.pop()
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        graphs.append(graph)
        for nested in graph._functions.values():
            nested_graph = getattr(nested, "graph", None)
            if nested_graph is not None:
                pending.append(nested_graph)
    return graphs


def _describe(graph, op, shape):
    return {
        "graph": graph.name,
        "op": op.name,
        "type": op.type,
        "shape": shape,
        # Ops nothing consumes are pruned when the function runs.
        "used": any(out.consumers() for out in op.outputs),
    }


def _inspect(graphs, num_rows, local_rows):
    """Ops with a full-table dimension, and ops with the shard's rows."""
    full, local = [], []
    num_ops = 0
    for graph in graphs:
        for op in graph.get_operations():
            num_ops += 1
            for out in op.outputs:
                if out.shape.rank is None or out.shape.rank == 0:
                    continue
                first = out.shape[0]
                if first == num_rows:
                    full.append(_describe(graph, op, out.shape.as_list()))
                elif first == local_rows:
                    local.append(_describe(graph, op, out.shape.as_list()))
            index = _SHAPE_INPUT.get(op.type)
            if index is not None and index < len(op.inputs):
                value = tf.get_static_value(op.inputs[index])
                if value is not None and np.size(value) >= 1:
                    first = np.ravel(value)[0]
                    if int(first) >= num_rows:
                        full.append(
                            _describe(graph, op, f"shape input {value}")
                        )
    return full, local, num_ops


def main(argv):
    del argv
    rows, dim = FLAGS.rows, FLAGS.dim
    strategy = kh.HybridStrategy(timeout_seconds=60)
    with strategy.scope():
        ids = keras.Input((FLAGS.ids_per_sample,), dtype="int32")
        x = keras.layers.Embedding(rows, dim, name="item")(ids)
        x = keras.layers.GlobalAveragePooling1D()(x)
        model = keras.Model(ids, keras.layers.Dense(1)(x))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    table_var = model.get_layer("item").embeddings
    table = table_var.value
    rng = np.random.default_rng(0)  # same data on every rank
    num = FLAGS.batch * FLAGS.steps
    x_data = rng.integers(0, rows, (num, FLAGS.ids_per_sample), "int32")
    y_data = rng.normal(size=(num, 1)).astype("float32")
    # Traces the train function (and runs a few steps).
    model.fit(x_data, y_data, batch_size=FLAGS.batch, epochs=1, verbose=0)
    graphs = _graphs(model)
    full, local, num_ops = _inspect(graphs, rows, table.shape[0])
    stats = strategy.communicator.stats
    before = stats.snapshot()
    model.fit(x_data, y_data, batch_size=FLAGS.batch, epochs=1, verbose=0)
    delta = stats.delta(before)
    save_result(
        FLAGS.out_dir,
        strategy.rank,
        {
            "is_sharded_table": isinstance(table, ShardedTable),
            "path": table_var.path,
            "local_shape": tuple(table.shape.as_list()),
            "full_shape": table.full_shape,
            "rows_on_shards": [
                table.partition.rows_on_shard(s)
                for s in range(table.partition.num_shards)
            ],
            "graphs": [g.name for g in graphs],
            "num_ops": num_ops,
            "full_table_ops": full,
            "local_rows_ops": local,
            "comm": delta,
            "steps": FLAGS.steps,
            "local_ids_per_step": FLAGS.batch
            * FLAGS.ids_per_sample
            // strategy.size,
            "tracing_counts": [
                f.experimental_get_tracing_count()
                for f in _tf_functions(model.train_function)
            ],
        },
    )


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir"])
    app.run(main)
