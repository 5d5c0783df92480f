"""Pool scenario: trains every [model, optimizer] config three times
under one `HybridStrategy(hierarchical=True)`: with the hierarchical, the
flat, and the cost model's choice of sparse exchange; returns per config
and exchange the weights before and after, the bytes that crossed hosts
and the exchange that ran. With `hot_rows`, hot rows are on too,
re-chosen every `EVERY` steps (`HotRowsRefresh`).

Run by `test_hierarchical_multiprocess.py` on 4 workers that
`KERAS_HYBRID_HOSTS` places on 2 emulated hosts. Ranks seed differently
on purpose (the strategy makes them agree).
"""

import keras
import sparse_cases as cases  # noqa: I001  (sits beside this script)

import keras_hybrid as kh
from keras_hybrid.callbacks import HotRowsRefresh
from keras_hybrid.testing import SPARSE_TABLES

EVERY = 4  # steps between two choices of hot rows


def train(configs: list, exchanges: list, hot_rows: int = 0) -> dict:
    """Trains each [model, optimizer] of `configs` with each exchange of
    `exchanges` (True: hierarchical, False: flat, None: the cost model
    decides at the first step)."""
    with kh.HybridStrategy(
        timeout_seconds=60,
        variable_kinds=SPARSE_TABLES,
        hierarchical=True,
        hot_rows=hot_rows,
    ) as strategy:
        comm = strategy.communicator
        results = {
            "size": strategy.size,
            "hierarchical": comm.hierarchical,
            "host_of": comm.hosts.host_of,
            "local_of": comm.hosts.local_of,
        }
        for model_name, opt_name in configs:
            for hierarchical in exchanges:
                comm.hierarchical = hierarchical
                key = (cases.key(model_name, opt_name), hierarchical)
                results[key] = train_one(
                    strategy, model_name, opt_name, hot_rows
                )
                results[key]["decided"] = comm.hierarchical
        return results


def train_one(strategy, model_name, opt_name, hot_rows):
    keras.utils.set_random_seed(cases.SEED + 1000 * strategy.rank)
    with strategy.scope():
        model = cases.build_model(model_name)
        model.compile(
            optimizer=cases.make_optimizer(opt_name), loss=cases.make_loss()
        )
    initial = model.get_weights()
    x, y = cases.make_data()
    stats = strategy.communicator.stats
    before, cross_before = stats.snapshot(), stats.cross_host_snapshot()
    rows_before = stats.rows_served()
    callbacks = [HotRowsRefresh(EVERY)] if hot_rows else []
    model.fit(
        x,
        y,
        batch_size=cases.BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )
    return {
        "initial": initial,
        "final": model.get_weights(),
        "moved": stats.delta(before),
        "cross_host": stats.cross_host_delta(cross_before),
        "rows_served": stats.rows_served() - rows_before,
    }
