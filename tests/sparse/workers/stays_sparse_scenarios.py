"""Pool scenario: trains an Embedding model, then inspects its traced
train step.

Run by `tests/sparse/test_sparse_stays_sparse.py` on the pool of 2
workers. It returns, per rank, every op of the traced train
function (and of the functions nested in it) whose output has the table's
full row count as static first dimension, or that builds a tensor of the
full table's shape; the ops that touch the shard's own row count; the
`CommStats` delta of a few more steps; and the shard's shape.
"""

import graph_scan  # noqa: I001  (sits beside this script)
import keras
import numpy as np

import keras_hybrid as kh
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing import SPARSE_TABLES

BATCH = 64  # global
IDS_PER_SAMPLE = 5


def train_and_scan(rows: int, dim: int, steps: int) -> dict:
    """Trains a `rows` x `dim` table, scans its step, measures `steps`."""
    with kh.HybridStrategy(
        timeout_seconds=60, variable_kinds=SPARSE_TABLES
    ) as strategy:
        return _train_and_scan(strategy, rows, dim, steps)


def _train_and_scan(strategy, rows: int, dim: int, steps: int) -> dict:
    with strategy.scope():
        ids = keras.Input((IDS_PER_SAMPLE,), dtype="int32")
        x = keras.layers.Embedding(rows, dim, name="item")(ids)
        x = keras.layers.GlobalAveragePooling1D()(x)
        model = keras.Model(ids, keras.layers.Dense(1)(x))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    table_var = model.get_layer("item").embeddings
    table = table_var.value
    rng = np.random.default_rng(0)  # same data on every rank
    num = BATCH * steps
    x_data = rng.integers(0, rows, (num, IDS_PER_SAMPLE), "int32")
    y_data = rng.normal(size=(num, 1)).astype("float32")
    # Traces the train function (and runs a few steps).
    model.fit(x_data, y_data, batch_size=BATCH, epochs=1, verbose=0)
    graphs = graph_scan.graphs(model)
    full, local, num_ops = graph_scan.inspect(graphs, rows, table.shape[0])
    stats = strategy.communicator.stats
    before = stats.snapshot()
    model.fit(x_data, y_data, batch_size=BATCH, epochs=1, verbose=0)
    delta = stats.delta(before)
    return {
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
        "steps": steps,
        "local_ids_per_step": BATCH * IDS_PER_SAMPLE // strategy.size,
        "tracing_counts": [
            f.experimental_get_tracing_count()
            for f in graph_scan.tf_functions(model.train_function)
        ],
    }
