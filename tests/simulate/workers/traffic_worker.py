"""Worker: trains `traffic_model` and saves the bytes it sent per step.

Run by `test_traffic_multiprocess.py` through `keras-hybrid-run`. With
`--mode=hybrid` the table is partitioned; with `--mode=allgather` it is
kept replicated (`variable_kinds`), so its `IndexedSlices` gradient is
all-gathered as stock TensorFlow does.
"""

import keras
import numpy as np
import traffic_model as tm  # noqa: I001  (sits beside this script)
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.comm.comm_stats import PATHS
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_enum("mode", "hybrid", ["hybrid", "allgather"], "Table kind.")
flags.DEFINE_integer("warmup_steps", 1, "Steps before measuring.")
flags.DEFINE_integer("steps", 4, "Measured steps.")


class StepBytes(keras.callbacks.Callback):
    """Bytes sent per path in each train step."""

    def __init__(self, stats) -> None:
        super().__init__()
        self._stats = stats
        self.rows: list[list[int]] = []

    def _now(self):
        snap = self._stats.snapshot()
        return [snap[p]["bytes"] for p in PATHS]

    def on_train_batch_begin(self, batch, logs=None):
        self._last = self._now()

    def on_train_batch_end(self, batch, logs=None):
        now = self._now()
        self.rows.append([a - b for a, b in zip(now, self._last, strict=True)])


def main(argv):
    del argv
    keras.utils.set_random_seed(0)
    # Both modes are fixed: the test compares the simulator with each path.
    kinds = {
        ".*tokens/embeddings": "dense"
        if FLAGS.mode == "allgather"
        else "sparse"
    }
    # allgather: stock TF's path, whatever the cost rule would choose.
    slices = "allgather" if FLAGS.mode == "allgather" else None
    strategy = kh.HybridStrategy(variable_kinds=kinds, indexed_slices=slices)
    global_batch = tm.SEQS_PER_WORKER * strategy.size
    ids, labels = tm.make_data(
        (FLAGS.warmup_steps + FLAGS.steps) * global_batch
    )
    with strategy.scope():
        model = tm.build_model()
    split = FLAGS.warmup_steps * global_batch
    fit = dict(batch_size=global_batch, shuffle=False, verbose=0)
    model.fit(ids[:split], labels[:split], **fit)
    recorder = StepBytes(strategy.communicator.stats)
    model.fit(ids[split:], labels[split:], callbacks=[recorder], **fit)
    save_result(
        FLAGS.out_dir,
        strategy.rank,
        {
            "size": strategy.size,
            "paths": PATHS,
            "sent": np.array(recorder.rows, np.int64),
            "kinds": {v.path: v.kind for v in strategy.plan.variables},
        },
    )


if __name__ == "__main__":
    app.run(main)
