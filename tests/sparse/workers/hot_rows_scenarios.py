"""Pool scenario: trains `sparse_cases` models with hot rows on,
re-chosen every `EVERY` steps, and returns per config the initial and
final weights and the hot sets chosen (run by
`test_hot_rows_multiprocess.py`).

Ranks seed differently on purpose (tables are seeded from rank 0).
"""

import keras
import sparse_cases as cases  # noqa: I001  (sits beside this module)

import keras_hybrid as kh
from keras_hybrid.callbacks import HotRowsRefresh
from keras_hybrid.testing import SPARSE_TABLES

HOT_ROWS = 16  # per table
EVERY = 4  # steps between two choices of hot rows


class _Record(HotRowsRefresh):
    """Keeps every hot set chosen, not only the last."""

    def __init__(self, every):
        super().__init__(every)
        self.history = []

    def refresh(self):
        super().refresh()
        self.history.append({p: ids.tolist() for p, ids in self.chosen.items()})


def train(configs: list) -> dict:
    """Trains each [model, optimizer] of `configs` with hot rows."""
    with kh.HybridStrategy(
        timeout_seconds=60, variable_kinds=SPARSE_TABLES, hot_rows=HOT_ROWS
    ) as strategy:
        results = {"size": strategy.size}
        for model_name, opt_name in configs:
            name = cases.key(model_name, opt_name)
            results[name] = train_one(strategy, model_name, opt_name)
        return results


def train_one(strategy, model_name, opt_name):
    keras.utils.set_random_seed(cases.SEED + 1000 * strategy.rank)
    with strategy.scope():
        model = cases.build_model(model_name)
        model.compile(
            optimizer=cases.make_optimizer(opt_name), loss=cases.make_loss()
        )
    initial = model.get_weights()
    x, y = cases.make_data()
    record = _Record(EVERY)
    rows_before = strategy.communicator.stats.rows_served()
    model.fit(
        x,
        y,
        batch_size=cases.BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[record],
    )
    return {
        "initial": initial,
        "final": model.get_weights(),
        "hot_history": record.history,
        "rows_served": strategy.communicator.stats.rows_served() - rows_before,
    }
