"""Worker: a plain `fit` script in which one worker dies by SIGKILL.

Nothing elastic in it: a callback records `strategy.size` per step into
`progress.jsonl` (on the chief) and, on the worker of rank
`--kill_rank` while the job has `--kill_size` workers, at its step
`--kill_at_step`, writes `--slots_after` into the discovery file
`--slots_file` (the host's slot is gone) and kills its own process with
SIGKILL. The chief sleeps `--step_sleep` seconds per step so that the
launcher's recovery happens mid-epoch. The chief saves the final weights.

`--model=table` trains the partitioned `Embedding` model of
`elastic_cases` (the same initial rows on every rank, no shuffling; the
chief also saves the initial weights for the reference). `--slots_later`,
if set, is written into the discovery file by the chief once the job
trained `--grow_after` steps on fewer workers: the lost slot comes back
and the launcher admits a joiner. With `--string_ids` its ids arrive as
strings through a `StringLookup` in a `tf.data` map, whose table the
recovery's new eager context must make again.
"""

import json
import os
import signal
import time

import elastic_cases as cases  # noqa: I001  (sits beside this script)
import keras
import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing import SPARSE_TABLES
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
flags.DEFINE_enum("model", "mlp", cases.MODELS, "mlp, or table.")
flags.DEFINE_string("slots_later", "", "Slots once the job shrank.")
flags.DEFINE_integer("grow_after", 5, "Steps on fewer workers before.")
flags.DEFINE_bool("string_ids", False, "Table ids as strings, looked up.")
flags.DEFINE_integer(
    "accumulation", 0, "The optimizer's gradient_accumulation_steps, if set."
)


class SizeLog(keras.callbacks.Callback):
    """Records the membership each step sees; kills one worker once."""

    def __init__(self, strategy, path):
        super().__init__()
        self.strategy = strategy
        self.path = path
        self.step = 0
        self.shrunk_steps = 0

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
        self._maybe_grow_back()
        with open(self.path, "a") as f:
            f.write(
                json.dumps(
                    {"step": self.step, "size": strategy.size, "batch": batch}
                )
                + "\n"
            )
        time.sleep(FLAGS.step_sleep)

    def _maybe_grow_back(self):
        if not FLAGS.slots_later or self.strategy.size >= FLAGS.kill_size:
            return
        self.shrunk_steps += 1
        if self.shrunk_steps != FLAGS.grow_after:
            return
        directory = os.environ["KERAS_HYBRID_ELASTIC_DIR"]
        before = _plans(directory)
        with open(FLAGS.slots_file + ".tmp", "w") as f:
            f.write(FLAGS.slots_later + "\n")
        os.replace(FLAGS.slots_file + ".tmp", FLAGS.slots_file)
        # Hold until the launcher planned the joiner in (it was ready), so
        # that the job does not end before it is admitted.
        deadline = time.monotonic() + 300
        while _plans(directory) == before:
            if time.monotonic() > deadline:
                raise RuntimeError("No joiner was planned in.")
            time.sleep(0.05)


def _plans(directory: str) -> set:
    """The launcher's membership plans written so far."""
    return {n for n in os.listdir(directory) if n.startswith("plan-")}


def _looked_up(x, y) -> tf.data.Dataset:
    """The batches of `((ids, features), y)` with each id sent as the
    string `id<n>` and mapped back to `n` by a `StringLookup`."""
    (ids, features) = x
    lookup = keras.layers.StringLookup(
        vocabulary=[f"id{i}" for i in range(cases.VOCAB)], num_oov_indices=0
    )
    strings = tf.strings.join(["id", tf.strings.as_string(ids)])
    dataset = tf.data.Dataset.from_tensor_slices(((strings, features), y))
    return dataset.batch(FLAGS.batch_size).map(
        lambda x, y: ((tf.cast(lookup(x[0]), ids.dtype), x[1]), y)
    )


def main(argv):
    del argv
    table = FLAGS.model == "table"
    strategy = kh.HybridStrategy(
        variable_kinds=SPARSE_TABLES if table else {".*": "dense"},
        timeout_seconds=FLAGS.timeout_seconds,
    )
    x, y = cases.make_data(FLAGS.model, FLAGS.num_samples)
    # A pipeline per worker cannot follow the members: refused up front.
    try:
        strategy.distribute_datasets_from_function(
            lambda context: tf.data.Dataset.range(4)
        )
        per_worker = "accepted"
    except ValueError as error:
        per_worker = str(error)
    # So is a pipeline sharded by worker (a script written for Horovod).
    try:
        strategy.experimental_distribute_dataset(
            tf.data.Dataset.range(8).shard(strategy.size, strategy.rank)
        )
        sharded = "accepted"
    except ValueError as error:
        sharded = str(error)
    seed = 100 if table else 100 + strategy.rank
    with strategy.scope():
        model = cases.build_model(FLAGS.model, seed=seed)
        extra = {}
        if FLAGS.accumulation:
            extra["gradient_accumulation_steps"] = FLAGS.accumulation
        models.compile_model(model, "adam", **extra)
    # A collective with a partitioned table; a joiner holds all its rows.
    initial = model.get_weights() if table else None
    keras.utils.set_random_seed(7)
    stats = kh.callbacks.CommunicationStats(every_n_steps=5)
    data = dict(x=x, y=y, batch_size=FLAGS.batch_size)
    if FLAGS.string_ids:
        data = dict(x=_looked_up(x, y))
    model.fit(
        **data,
        epochs=FLAGS.epochs,
        shuffle=not table,
        verbose=0,
        callbacks=[
            SizeLog(strategy, os.path.join(FLAGS.out_dir, "progress.jsonl")),
            stats,
        ],
    )
    # A collective with a partitioned table: every member reads.
    weights = model.get_weights()
    if strategy.is_chief:
        save_result(
            FLAGS.out_dir,
            0,
            {
                "weights": weights,
                "initial": initial,
                "plan": str(strategy.plan),
                "resizes": strategy.communicator.stats.resizes,
                "stats_resizes": stats.summary["resizes"],
                "size": strategy.size,
                "per_worker_pipeline": per_worker,
                "sharded_pipeline": sharded,
            },
        )


if __name__ == "__main__":
    app.run(main)
