"""Pool scenario: moves partitioned tables and their Adam slots between
workers in memory (`sparse.resharding`) in the middle of training.

Run by `test_resharding_multiprocess.py` on the pool of 4 workers. The
two-table model of `sparse_cases` (tables of 500x8 and 500x4, Adam) trains
2 steps with its tables on all 4 workers, then the tables shrink onto 3
(worker 3 keeps none) and train 1 step; worker 3 then holds the shards of
a fresh joiner and adopts rank 0's layout (`adopt_partitions`); the tables
grow back onto 4 and train 1 more. The global batches are the same as one
process's. Returned per rank: the full weights and slots around each
resize, the bytes each resize sent (its return value and `CommStats`), the
rows each shard holds, and the plan's text.
"""

import keras
import numpy as np
import sparse_cases as cases  # noqa: I001  (sits beside this module)

import keras_hybrid as kh
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.sparse import resharding
from keras_hybrid.testing import SPARSE_TABLES

BATCH = 48
STEPS = 4
DATA_SEED = 11


def full_state(model, tables) -> dict:
    """Weights and every table's and slot's full value (collectives)."""
    return {
        "weights": model.get_weights(),
        "tables": {t.path: t.gather_full() for t in tables},
    }


def storage_rows(tables) -> dict:
    """Rows each shard's variable really holds (not what it believes)."""
    return {t.path: int(t.read_value().shape[0]) for t in tables}


def resize(strategy, model, tables, num_workers: int) -> dict:
    state_before = full_state(model, tables)
    stats = strategy.communicator.stats
    before = stats.snapshot()
    sent = resharding.reshard_tables(tables, strategy.communicator, num_workers)
    delta = stats.delta(before)
    # Lookups captured the old layout: trace the step again.
    model.make_train_function(force=True)
    return {
        "returned": sent,
        "reshard": delta["reshard"],
        "padding": delta["padding"],
        "rows": storage_rows(tables),
        "state_before": state_before,
        "state": full_state(model, tables),
        "plan": str(strategy.plan),
    }


def pretend_to_join(tables) -> None:
    """Gives this worker's (empty) shards the layout and rows a worker
    started afresh on 4 workers would have: `adopt_partitions` must throw
    them away."""
    for table in tables:
        fresh = RowPartition.create(table.full_shape[0], 4)
        rows = fresh.rows_on_shard(3)
        table.take_rows(fresh, np.full((rows, *table.full_shape[1:]), 7.0))


def reshard() -> dict:
    """Trains, shrinks onto 3, trains, grows back onto 4, trains."""
    with kh.HybridStrategy(variable_kinds=SPARSE_TABLES) as strategy:
        return _reshard(strategy)


def _reshard(strategy) -> dict:
    keras.utils.set_random_seed(cases.SEED)
    with strategy.scope():
        model = cases.build_model("two_tables")
        model.compile(
            optimizer=keras.optimizers.Adam(0.01), loss=cases.make_loss()
        )
    x, y = cases.make_data(STEPS * BATCH, seed=DATA_SEED)

    def train(first: int, steps: int) -> None:
        part = slice(first * BATCH, (first + steps) * BATCH)
        model.fit(x[part], y[part], batch_size=BATCH, shuffle=False, verbose=0)

    initial = model.get_weights()
    train(0, 2)
    tables = resharding.tables_of(strategy)
    result = {
        "size": strategy.size,
        "initial": initial,
        "paths": [t.path for t in tables],
        "rows_before": storage_rows(tables),
    }
    result["shrink"] = resize(strategy, model, tables, 3)
    train(2, 1)
    result["after_shrink_step"] = model.get_weights()
    if strategy.rank == 3:
        pretend_to_join(tables)
    resharding.adopt_partitions(tables, strategy.communicator)
    result["grow"] = resize(strategy, model, tables, 4)
    train(3, 1)
    result["final"] = model.get_weights()
    result["final_tables"] = {t.path: t.gather_full() for t in tables}
    return result
