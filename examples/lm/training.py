"""What every example script shares: its common flags and callbacks.

Kept small on purpose: an example is `main.py` (flags), `train.py` (data,
model, `train`), and this file. Each example folder holds the same copy
(`tests/examples/test_standalone_examples.py` checks they stay equal), so
that a copied folder runs on its own.
"""

import csv
import dataclasses
import os

import keras
import numpy as np
from absl import flags


def define_common_flags(steps: int, batch_size: int, epochs: int) -> None:
    """Defines the flags every example takes, with its own defaults."""
    flags.DEFINE_integer(
        "steps",
        steps,
        "Training steps per epoch. Synthetic data has exactly this many "
        "global batches; with --data, 0 means the whole file.",
        lower_bound=0,
    )
    flags.DEFINE_integer(
        "batch_size", batch_size, "Global batch size (all workers).", 1
    )
    flags.DEFINE_integer("epochs", epochs, "Number of epochs.", lower_bound=1)
    flags.DEFINE_string(
        "data", "", "Input file (see --helpfull); empty: synthetic data."
    )
    flags.DEFINE_string(
        "model_dir",
        "",
        "If set, training state is backed up here every epoch and an "
        "interrupted run resumes from it (keras.callbacks.BackupAndRestore).",
    )
    # `--log_dir` is absl.logging's own flag (default ""). absl writes log
    # files there only when asked to; the examples write TensorBoard logs.
    flags.DEFINE_string(
        "step_log", "", "If set, rank 0 writes the loss of every step here."
    )
    flags.DEFINE_integer("seed", 0, "Seed of the data and the model.")


@dataclasses.dataclass(frozen=True)
class CommonConfig:
    """The settings of `define_common_flags`; each example's `Config`
    extends it with its own."""

    steps: int
    batch_size: int
    epochs: int
    data: str = ""
    seed: int = 0
    model_dir: str = ""
    log_dir: str = ""
    step_log: str = ""


def config_from_flags(config_class, **overrides):
    """An example's `Config` whose every field is the flag of that name
    (or an entry of `overrides`, for a flag that needs parsing)."""
    values = {}
    for field in dataclasses.fields(config_class):
        if field.name in overrides:
            values[field.name] = overrides[field.name]
        elif field.name in flags.FLAGS:
            values[field.name] = flags.FLAGS[field.name].value
        else:
            raise ValueError(
                f"{config_class.__qualname__}.{field.name} has no flag of "
                "that name; define one or pass it in `overrides`."
            )
    return config_class(**values)


def zipf_ids(rng, vocab: int, size, s: float = 1.1) -> np.ndarray:
    """Ids in `[0, vocab)` with `p(k) ~ 1 / (k + 1)**s`, like word or item
    frequencies: id 0 is the most frequent."""
    p = 1.0 / np.arange(1, vocab + 1, dtype=np.float64) ** s
    return rng.choice(vocab, size=size, p=p / p.sum())


class StepLossLogger(keras.callbacks.Callback):
    """Writes `step,loss` for every training step to a CSV file.

    Keras gives callbacks the running mean of the loss over the epoch; the
    loss of step k is recovered as `k * mean_k - (k - 1) * mean_(k - 1)`.

    Args:
        path: String. The CSV file to write.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._step = 0

    def on_train_begin(self, logs=None):
        self._file = open(self.path, "w", newline="")  # noqa: SIM115
        self._writer = csv.writer(self._file)
        self._writer.writerow(["step", "loss"])

    def on_epoch_begin(self, epoch, logs=None):
        self._mean = 0.0

    def on_train_batch_end(self, batch, logs=None):
        mean = float(logs["loss"])
        loss = (batch + 1) * mean - batch * self._mean
        self._mean = mean
        self._step += 1
        self._writer.writerow([self._step, f"{loss:.6f}"])

    def on_train_end(self, logs=None):
        self._file.close()


def _require_tensorboard() -> None:
    # tf.summary writes nothing without it; fail before training, not after.
    try:
        import tensorboard  # noqa: F401
    except ModuleNotFoundError as e:
        raise ImportError(
            "`--log_dir` writes TensorBoard logs and needs the `tensorboard` "
            "package: `pip install tensorboard` (or "
            '`pip install "keras-hybrid[examples]"`).'
        ) from e


def callbacks(
    model_dir: str, log_dir: str, step_log: str, is_chief: bool
) -> list:
    """The callbacks `--model_dir`, `--log_dir` and `--step_log` ask for.

    Every worker backs up and restores (each holds its own shard of the
    tables); only rank 0 writes TensorBoard logs and the step log.
    """
    out = []
    if model_dir:
        os.makedirs(model_dir, exist_ok=True)
        out.append(
            keras.callbacks.BackupAndRestore(model_dir, delete_checkpoint=False)
        )
    if log_dir and is_chief:
        _require_tensorboard()
        out.append(keras.callbacks.TensorBoard(log_dir, update_freq="epoch"))
    if step_log and is_chief:
        out.append(StepLossLogger(step_log))
    return out
