"""The soak's training script: a plain `fit` of the soak model (a
partitioned table, Adam), into which `faults.Injector` injects SIGKILLs.

Nothing elastic in the training code. Callbacks:

- the chief records each step's membership (`progress.jsonl`) and, at the
  global steps of `--slots_plan`, rewrites the discovery file (a grow or
  a shrink), holding the step until the launcher planned the change when
  told to, so that it lands at that step; it sleeps `--step_sleep` per
  step;
- every worker reads `logs["loss"]` at each epoch's end, as users'
  callbacks do, and records it (`epoch_logs.jsonl`);
- with `--save_model`, every worker calls `model.save` at each epoch's
  end; with `--checkpoint_dir`, a `ShardedCheckpoint` saves there.

The first chief saves the initial weights (`initial.pkl`), the last one
the final weights (`result.pkl`); every worker marks its clean end
(`done-<task>`).

```sh
keras-hybrid-run --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh \\
    python -m keras_hybrid.testing.soak.worker --out_dir=/tmp/soak \\
    --faults='[{"rank": 0, "step": 20, "moment": "commit"}]'
```
"""

import json
import os
import pickle
import time

import keras
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.launch.elastic.host_discovery import parse_slots
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing.soak import faults as faults_lib
from keras_hybrid.testing.soak import model as soak_model

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where results and markers go.")
flags.DEFINE_string("faults", "[]", "The faults, as `faults.dumps` JSON.")
flags.DEFINE_integer("epochs", 3, "Epochs.")
flags.DEFINE_integer("num_samples", 288, "Samples.")
flags.DEFINE_integer("batch_size", 12, "Global batch size.")
flags.DEFINE_float("step_sleep", 0.02, "The chief's sleep per step.")
flags.DEFINE_string("slots_file", None, "The discovery script's file.")
flags.DEFINE_string(
    "slots_plan",
    "[]",
    "JSON list of [global step, slots line, hold]: the chief writes the "
    "slots line into --slots_file after that step; with hold, it waits "
    "until the launcher wrote its next plan.",
)
flags.DEFINE_bool("save_model", False, "model.save at each epoch's end.")
flags.DEFINE_string("checkpoint_dir", None, "A ShardedCheckpoint folder.")
flags.DEFINE_float("timeout_seconds", 60.0, "The strategy's timeout.")
flags.DEFINE_float("hold_seconds", 120.0, "Longest hold for a plan.")


def global_step(strategy) -> int:
    """The job's global step after the step that has just ended, as the
    user's callbacks see it (before `ElasticResize` counts it)."""
    return strategy.communicator.membership.global_step + 1


class Progress(keras.callbacks.Callback):
    """The chief's record of each step, its discovery changes and pace."""

    def __init__(self, strategy, plan: list) -> None:
        super().__init__()
        self.strategy = strategy
        self.plan = plan

    def on_train_batch_end(self, batch, logs=None):
        strategy = self.strategy
        if not strategy.is_chief:
            return
        step = global_step(strategy)
        for i, (at, slots, hold) in enumerate(self.plan):
            if at == step and _once(f"slots-{i}"):
                self._change_slots(slots, hold)
        with open(os.path.join(FLAGS.out_dir, "progress.jsonl"), "a") as f:
            record = {"step": step, "size": strategy.size, "batch": batch}
            f.write(json.dumps(record) + "\n")
        time.sleep(FLAGS.step_sleep)

    def _change_slots(self, slots: str, hold: bool) -> None:
        channel = self.strategy.communicator.membership.channel
        before = _plans(channel)
        tmp = f"{FLAGS.slots_file}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(slots + "\n")
        os.replace(tmp, FLAGS.slots_file)
        # No plan comes for slots the job already fills (a joiner that
        # took a kept slot may have come long before this step).
        hold = hold and _slot_count(slots) != self.strategy.size
        deadline = time.monotonic() + FLAGS.hold_seconds
        while hold and _plans(channel) == before:
            if time.monotonic() > deadline:
                raise RuntimeError(f"The launcher planned no change: {slots}")
            time.sleep(0.05)


def _slot_count(slots: str) -> int:
    """Slots of discovery output, as the launcher reads it:
    `"localhost:3"` -> 3."""
    return sum(count for _, count in parse_slots(slots))


class EpochLogs(keras.callbacks.Callback):
    """Reads `logs["loss"]` at each epoch's end, on every worker."""

    def __init__(self, strategy) -> None:
        super().__init__()
        self.strategy = strategy

    def on_epoch_end(self, epoch, logs=None):
        membership = self.strategy.communicator.membership
        record = {
            "task": membership.task,
            "rank": self.strategy.rank,
            "size": self.strategy.size,
            "epoch": epoch,
            "generation": membership.generation,
            "global_step": membership.global_step,
            "loss": float(logs["loss"]),
        }
        with open(os.path.join(FLAGS.out_dir, "epoch_logs.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")


class SaveEachEpoch(keras.callbacks.Callback):
    """`model.save` at each epoch's end (every worker calls it)."""

    def __init__(self, injector) -> None:
        super().__init__()
        self.injector = injector

    def on_epoch_end(self, epoch, logs=None):
        self.injector.saving = True
        try:
            self.model.save(os.path.join(FLAGS.out_dir, "model.keras"))
        finally:
            self.injector.saving = False


def _plans(channel) -> set:
    """The launcher's plans written so far (membership and recovery)."""
    return {
        n
        for n in channel.names()
        if n.startswith(("plan-", "recover-")) and n.endswith(".json")
    }


def _once(name: str) -> bool:
    """Whether this call is the job's first with `name` (a marker)."""
    try:
        os.close(
            os.open(
                os.path.join(FLAGS.out_dir, name),
                os.O_CREAT | os.O_EXCL | os.O_WRONLY,
            )
        )
    except FileExistsError:
        return False
    return True


def _save(name: str, obj) -> None:
    path = os.path.join(FLAGS.out_dir, name)
    with open(path + ".tmp", "wb") as f:
        pickle.dump(obj, f)
    os.replace(path + ".tmp", path)


def main(argv):
    del argv
    strategy = kh.HybridStrategy(
        variable_kinds=SPARSE_TABLES, timeout_seconds=FLAGS.timeout_seconds
    )
    membership = strategy.communicator.membership
    injector = faults_lib.Injector(
        faults_lib.loads(FLAGS.faults),
        FLAGS.out_dir,
        membership,
        FLAGS.slots_file,
    )
    x, y = soak_model.make_data(FLAGS.num_samples)
    with strategy.scope():
        model = soak_model.build_model()
    if not membership.joining:
        initial = model.get_weights()  # a collective of the first members
        if strategy.is_chief and _once("initial"):
            _save("initial.pkl", initial)
    callbacks = [
        Progress(strategy, json.loads(FLAGS.slots_plan)),
        EpochLogs(strategy),
        injector.callback(),
    ]
    if FLAGS.save_model:
        callbacks.append(SaveEachEpoch(injector))
    if FLAGS.checkpoint_dir:
        callbacks.append(kh.callbacks.ShardedCheckpoint(FLAGS.checkpoint_dir))
    with injector.installed():
        model.fit(
            x,
            y,
            batch_size=FLAGS.batch_size,
            epochs=FLAGS.epochs,
            shuffle=False,
            verbose=0,
            callbacks=callbacks,
        )
        weights = model.get_weights()  # a collective: every member reads
    if strategy.is_chief:
        _save(
            "result.pkl",
            {
                "weights": weights,
                "resizes": strategy.communicator.stats.resizes,
                "size": strategy.size,
                "task": membership.task,
            },
        )
    _once(f"done-{membership.task}")


if __name__ == "__main__":
    app.run(main)
