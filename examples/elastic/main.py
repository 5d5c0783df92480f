"""A plain `fit` script for elastic runs and the resize measurement.

Nothing elastic in the training code: run it with
`keras-hybrid-run --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh
python examples/elastic/main.py`. A callback prints the membership it
sees. The flags `--save_to`/`--restore_from` and `--report` serve
`measure_resize.py` (a sharded save after `fit`, a restore before it, and
the chief's JSON report of resizes and step times). With `--vocab` the
model also looks up 4 ids per sample in an `Embedding(vocab,
embedding_dim)` that the strategy partitions over the workers; its rows
move at each resize. `--die_at_step` serves `measure_commit.py` (a worker
lost by SIGKILL at a global step: the job's steps, which a joiner takes
over from the members and a recovery rewinds to its commit's).
"""

import json
import os
import signal
import time

import keras
import numpy as np
from absl import app
from absl import flags
from absl import logging

import keras_hybrid as kh

FLAGS = flags.FLAGS
flags.DEFINE_integer("epochs", 2, "Epochs.")
flags.DEFINE_integer("batch_size", 96, "Global batch size.")
flags.DEFINE_integer("num_samples", 9600, "Training samples.")
flags.DEFINE_integer("hidden", 512, "Width of the two hidden layers.")
flags.DEFINE_integer("steps_per_epoch", None, "Steps per epoch (all if unset).")
flags.DEFINE_integer(
    "vocab", 0, "Rows of a partitioned embedding table (0: no table)."
)
flags.DEFINE_integer("embedding_dim", 64, "Width of the table's rows.")
flags.DEFINE_float(
    "step_sleep",
    0.0,
    "Chief's sleep per step while "
    "`<report>.pace` exists (gives joiners time to start).",
)
flags.DEFINE_integer(
    "die_at_step",
    0,
    "If set, the worker of rank `--die_rank` SIGKILLs itself at the end of "
    "this global step (the job's steps, counted as commits and resizes "
    "count them, also on a worker that joined late), once per `--report` "
    "(measure_commit.py and measure_recovery.py measure the recovery).",
)
flags.DEFINE_integer(
    "die_rank",
    -1,
    "The rank that dies at `--die_at_step`: -1 for the highest, or a rank "
    "(0 is task 0, the collective leader).",
)
flags.DEFINE_string("report", None, "Chief writes a JSON report here.")
flags.DEFINE_string("save_to", None, "Sharded checkpoint folder after fit.")
flags.DEFINE_string("restore_from", None, "Checkpoint to restore before fit.")


class Membership(keras.callbacks.Callback):
    """Logs `strategy.size` when it changes and keeps step end times."""

    def __init__(self, strategy):
        super().__init__()
        self.strategy = strategy
        self.size = None
        self.step_ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.step_ends.append(time.time())
        strategy = self.strategy
        died = f"{FLAGS.report}.died"
        step = global_step(strategy, len(self.step_ends))
        dies = strategy.size - 1 if FLAGS.die_rank < 0 else FLAGS.die_rank
        if (
            step == FLAGS.die_at_step
            and strategy.rank == dies
            and strategy.size > 1
            and not os.path.exists(died)
        ):
            open(died, "w").close()  # one worker dies, once
            logging.warning(
                "rank %d dies at global step %d (its own step %d)",
                strategy.rank,
                step,
                len(self.step_ends),
            )
            os.kill(os.getpid(), signal.SIGKILL)
        if self.strategy.size != self.size:
            self.size = self.strategy.size
            logging.info(
                "step %d: rank %d of %d",
                len(self.step_ends),
                self.strategy.rank,
                self.size,
            )
        pace = f"{FLAGS.report}.pace" if FLAGS.report else None
        if self.strategy.is_chief and pace and os.path.exists(pace):
            time.sleep(FLAGS.step_sleep)


def global_step(strategy, local_steps: int) -> int:
    """The job's train steps so far, this one included, as seen from a
    callback's `on_train_batch_end`.

    Elastic training counts them in the strategy's membership (the count
    commits and resizes log): a joiner takes it over from the members, and
    a recovery sets it back to its commit's step. Without elastic
    training, `local_steps` (this process's steps) is the same count.
    """
    membership = getattr(strategy.communicator, "membership", None)
    if membership is None:
        return local_steps
    # `fit` runs the user's callbacks before `ElasticResize`, which counts
    # the step that has just ended.
    return membership.global_step + 1


def build_model():
    keras.utils.set_random_seed(0)
    features = keras.Input((64,))
    inputs, x = features, features
    if FLAGS.vocab:
        ids = keras.Input((4,), dtype="int32")
        rows = keras.layers.Embedding(FLAGS.vocab, FLAGS.embedding_dim)(ids)
        pooled = keras.layers.GlobalAveragePooling1D()(rows)
        inputs, x = [ids, features], keras.layers.Concatenate()([pooled, x])
    x = keras.layers.Dense(FLAGS.hidden, activation="relu")(x)
    x = keras.layers.Dense(FLAGS.hidden, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(x))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def main(argv):
    del argv
    start = time.time()
    # Joiners plan as one worker: name the table to partition.
    kinds = {".*embeddings": "sparse"} if FLAGS.vocab else {".*": "dense"}
    strategy = kh.HybridStrategy(variable_kinds=kinds)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(FLAGS.num_samples, 64)).astype("float32")
    y = rng.integers(0, 10, size=FLAGS.num_samples).astype("int32")
    if FLAGS.vocab:
        ids = rng.integers(0, FLAGS.vocab, size=(FLAGS.num_samples, 4))
        x = (ids.astype("int32"), x)
    with strategy.scope():
        model = build_model()
    if FLAGS.restore_from:
        strategy.restore_checkpoint(model, FLAGS.restore_from)
    restored = time.time()
    membership = Membership(strategy)
    model.fit(
        x,
        y,
        batch_size=FLAGS.batch_size,
        epochs=FLAGS.epochs,
        steps_per_epoch=FLAGS.steps_per_epoch,
        shuffle=False,
        verbose=0,
        callbacks=[membership],
    )
    saved = saved_at = None
    if FLAGS.save_to:
        t = time.time()
        strategy.save_checkpoint(model, FLAGS.save_to)
        saved_at = time.time()
        saved = saved_at - t
    if FLAGS.report and strategy.is_chief:
        with open(FLAGS.report, "w") as f:
            json.dump(
                {
                    "start": start,
                    "restored": restored,
                    "step_ends": membership.step_ends,
                    "save_seconds": saved,
                    "saved_at": saved_at,
                    "resizes": strategy.communicator.stats.resizes,
                    "size": strategy.size,
                },
                f,
            )


if __name__ == "__main__":
    app.run(main)
