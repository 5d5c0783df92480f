"""Worker: a plain `fit` script in which one worker dies by SIGKILL.

Nothing elastic in it: a callback records `strategy.size` per step into
`progress.jsonl` (on the chief) and, on the worker of rank
`--kill_rank` while the job has `--kill_size` workers, at its step
`--kill_at_step`, writes `--slots_after` into the discovery file
`--slots_file` (the host's slot is gone) and kills its own process with
SIGKILL. The chief sleeps `--step_sleep` seconds per step so that the
launcher's recovery happens mid-epoch. The chief saves the final weights.
"""

import json
import os
import signal
import time

import keras
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing import models
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save results.")
flags.DEFINE_integer("epochs", 2, "Epochs.")
flags.DEFINE_integer("batch_size", 12, "Global batch size.")
flags.DEFINE_integer("num_samples", 480, "Samples.")
flags.DEFINE_float("step_sleep", 0.0, "Chief's seconds of sleep per step.")
flags.DEFINE_integer("kill_rank", 2, "Rank of the worker that dies.")
flags.DEFINE_integer("kill_size", 3, "Job size at which it dies.")
flags.DEFINE_integer("kill_at_step", 25, "Its step at which it dies.")
flags.DEFINE_string("slots_file", None, "Discovery output to rewrite.")
flags.DEFINE_float("timeout_seconds", 60.0, "Strategy's timeout_seconds.")
flags.DEFINE_string("slots_after", "localhost:2", "Slots after the death.")


class SizeLog(keras.callbacks.Callback):
    """Records the membership each step sees; kills one worker once."""

    def __init__(self, strategy, path):
        super().__init__()
        self.strategy = strategy
        self.path = path
        self.step = 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        strategy = self.strategy
        killed = os.path.join(FLAGS.out_dir, "killed")
        if (
            strategy.rank == FLAGS.kill_rank
            and strategy.size == FLAGS.kill_size
            and self.step == FLAGS.kill_at_step
            and not os.path.exists(killed)
        ):
            open(killed, "w").close()  # one worker dies, once
            with open(FLAGS.slots_file + ".tmp", "w") as f:
                f.write(FLAGS.slots_after + "\n")
            os.replace(FLAGS.slots_file + ".tmp", FLAGS.slots_file)
            os.kill(os.getpid(), signal.SIGKILL)
        if not strategy.is_chief:
            return
        with open(self.path, "a") as f:
            f.write(
                json.dumps(
                    {"step": self.step, "size": strategy.size, "batch": batch}
                )
                + "\n"
            )
        time.sleep(FLAGS.step_sleep)


def main(argv):
    del argv
    strategy = kh.HybridStrategy(
        variable_kinds={".*": "dense"}, timeout_seconds=FLAGS.timeout_seconds
    )
    x, y = models.make_data(FLAGS.num_samples)
    with strategy.scope():
        model = models.build_model("sequential", seed=100 + strategy.rank)
        models.compile_model(model, "adam")
    keras.utils.set_random_seed(7)
    stats = kh.callbacks.CommunicationStats(every_n_steps=5)
    model.fit(
        x,
        y,
        batch_size=FLAGS.batch_size,
        epochs=FLAGS.epochs,
        shuffle=True,
        verbose=0,
        callbacks=[
            SizeLog(strategy, os.path.join(FLAGS.out_dir, "progress.jsonl")),
            stats,
        ],
    )
    if strategy.is_chief:
        save_result(
            FLAGS.out_dir,
            0,
            {
                "weights": model.get_weights(),
                "resizes": strategy.communicator.stats.resizes,
                "stats_resizes": stats.summary["resizes"],
                "size": strategy.size,
            },
        )


if __name__ == "__main__":
    app.run(main)
