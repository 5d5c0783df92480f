"""Pool scenario: a dropped model takes its partitioned table, its
optimizer slots and its traced train step with it.

Run by `tests/sparse/test_lifetime_multiprocess.py`. Each model is built,
trained a few steps (fused and per-lookup exchanges, Adam: pulls, pushes
and slots; a regularized table: the shard's penalty), then dropped; the
scenario reports, for every model but the last, whether weak references
to its table shard, its slots and its traced step's graphs are dead once
the next model is built and a collection ran (the strategy forgets a
dropped model's variables when it creates the next ones).
"""

import gc
import weakref

import keras
import numpy as np

import keras_hybrid as kh
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing import SPARSE_TABLES

BATCH = 32


def build_train_drop(
    models: int, fuse: bool, regularized: bool, hot_rows: int = 0
) -> dict:
    # A regularized table is partitioned only by placement (its penalty
    # then runs on each shard), so it is not forced sparse, and is large
    # enough for the cost rule.
    kinds = None if regularized else SPARSE_TABLES
    with kh.HybridStrategy(
        timeout_seconds=60, variable_kinds=kinds, hot_rows=hot_rows
    ) as strategy:
        strategy.extended.fuse_lookups = fuse
        alive, before = [], None
        for _ in range(models):
            refs = _train(strategy, regularized)
            gc.collect()
            if before is not None:
                alive.append({name: ref() is not None for name, ref in before})
            before = refs
        return {"alive": alive, "rank": strategy.rank}


def _train(strategy, regularized: bool) -> list:
    """Weak references to what the model made, after it is dropped."""
    regularizer = keras.regularizers.L2(1e-4) if regularized else None
    rows, dim = (200_000, 16) if regularized else (4000, 8)
    with strategy.scope():
        ids = keras.Input((3,), dtype="int32")
        table = keras.layers.Embedding(
            rows, dim, embeddings_regularizer=regularizer
        )
        x = keras.layers.GlobalAveragePooling1D()(table(ids))
        model = keras.Model(ids, keras.layers.Dense(1)(x))
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.integers(0, rows, (BATCH * 4, 3)).astype("int32")
    y = rng.normal(size=(BATCH * 4, 1)).astype("float32")
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    shard = table.embeddings.value
    assert isinstance(shard, ShardedTable), type(shard)
    slots = [
        v.value
        for v in model.optimizer.variables
        if isinstance(v.value, ShardedTable)
    ]
    assert slots, "Adam's slots of the table are not partitioned"
    graphs = [
        concrete.graph
        for function in _tf_functions(model.train_function)
        for concrete in function._list_all_concrete_functions()
    ]
    assert graphs, "no traced train step"
    refs = [("table", weakref.ref(shard))]
    refs += [(f"slot{i}", weakref.ref(s)) for i, s in enumerate(slots)]
    refs += [(f"graph{i}", weakref.ref(g)) for i, g in enumerate(graphs)]
    return refs


def _tf_functions(fn) -> list:
    """The `tf.function`s in the closure of Keras' `train_function`."""
    found = []
    for cell in getattr(fn, "__closure__", None) or ():
        value = cell.cell_contents
        if hasattr(value, "_list_all_concrete_functions"):
            found.append(value)
    return found
