"""Worker: trains every [model, optimizer] config of `--configs` three
times under one `HybridStrategy(hierarchical=True)`: with the
hierarchical, the flat, and the cost model's choice of sparse exchange;
saves per config and exchange the weights before and after, the bytes
that crossed hosts and the exchange that ran. With `--hot_rows`, hot rows
are on too, re-chosen every `--every` steps (`HotRowsRefresh`).

Run by `test_hierarchical_multiprocess.py` on 4 workers that
`KERAS_HYBRID_HOSTS` places on 2 emulated hosts. Ranks seed differently
on purpose (the strategy makes them agree).
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
flags.DEFINE_float("timeout", 60, "Collective timeout in seconds.")
flags.DEFINE_integer("hot_rows", 0, "Hot rows per table (0: off).")
flags.DEFINE_integer("every", 4, "Steps between two choices of hot rows.")
flags.DEFINE_list("exchanges", ["true", "false", "none"], "Exchanges to run.")

_EXCHANGES = {"true": True, "false": False, "none": None}


def train_one(strategy, model_name, opt_name):
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
    callbacks = [HotRowsRefresh(FLAGS.every)] if FLAGS.hot_rows else []
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


def main(argv):
    del argv
    strategy = kh.HybridStrategy(
        timeout_seconds=FLAGS.timeout,
        variable_kinds=SPARSE_TABLES,
        hierarchical=True,
        hot_rows=FLAGS.hot_rows,
    )
    comm = strategy.communicator
    results = {
        "size": strategy.size,
        "hierarchical": comm.hierarchical,
        "host_of": comm.hosts.host_of,
        "local_of": comm.hosts.local_of,
    }
    for model_name, opt_name in json.loads(FLAGS.configs):
        # None: the cost model decides at the first step.
        for hierarchical in [_EXCHANGES[e] for e in FLAGS.exchanges]:
            comm.hierarchical = hierarchical
            key = (cases.key(model_name, opt_name), hierarchical)
            results[key] = train_one(strategy, model_name, opt_name)
            results[key]["decided"] = comm.hierarchical
    save_result(FLAGS.out_dir, strategy.rank, results)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
