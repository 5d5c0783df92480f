"""Worker: trains `sparse_cases` models with hot rows on, re-chosen every
`--every` steps, and saves per config the initial and final weights and the
hot sets chosen (run by `test_hot_rows_multiprocess.py`).

Ranks seed differently on purpose (tables are seeded from rank 0).
"""

import json

import keras
import sparse_cases as cases  # noqa: I001  (sits beside this script)
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.callbacks import HotRowsRefresh
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string("configs", "[]", "JSON list of [model, optimizer].")
flags.DEFINE_integer("hot_rows", 16, "Hot rows per table.")
flags.DEFINE_integer("every", 4, "Steps between two choices of hot rows.")
flags.DEFINE_bool("fuse", True, "Fused exchange (else one per lookup).")
flags.DEFINE_float("timeout", 60, "Collective timeout in seconds.")


class _Record(HotRowsRefresh):
    """Keeps every hot set chosen, not only the last."""

    def __init__(self, every):
        super().__init__(every)
        self.history = []

    def refresh(self):
        super().refresh()
        self.history.append({p: ids.tolist() for p, ids in self.chosen.items()})


def train_one(strategy, model_name, opt_name):
    keras.utils.set_random_seed(cases.SEED + 1000 * strategy.rank)
    with strategy.scope():
        model = cases.build_model(model_name)
        model.compile(
            optimizer=cases.make_optimizer(opt_name), loss=cases.make_loss()
        )
    initial = model.get_weights()
    x, y = cases.make_data()
    record = _Record(FLAGS.every)
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


def main(argv):
    del argv
    strategy = kh.HybridStrategy(
        timeout_seconds=FLAGS.timeout,
        variable_kinds=SPARSE_TABLES,
        hot_rows=FLAGS.hot_rows,
    )
    strategy.extended.fuse_lookups = FLAGS.fuse
    results = {"size": strategy.size}
    for model_name, opt_name in json.loads(FLAGS.configs):
        name = cases.key(model_name, opt_name)
        results[name] = train_one(strategy, model_name, opt_name)
    save_result(FLAGS.out_dir, strategy.rank, results)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
