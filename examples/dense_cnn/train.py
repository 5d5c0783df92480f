"""A small CNN with no sparse variables: the parity case.

Every variable is dense, so `HybridStrategy` behaves like plain data
parallelism (all-reduced gradients) and N workers match one process on
the global batch. Lines marked `# keras_hybrid:` are all that distribution
adds.
"""

import dataclasses

import keras
import numpy as np
from absl import logging

import keras_hybrid  # keras_hybrid:

# Run as a script (`python examples/dense_cnn/main.py`, or from a copy of this
# folder) its siblings are top-level modules; as `examples.dense_cnn.train`,
# modules of the package.
if __package__:
    from . import training
else:
    import training

SIDE = 28
CLASSES = 10


def build_model(classes: int, input_shape=(SIDE, SIDE, 1)) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input(input_shape),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(classes),
        ]
    )


def synthetic_images(num: int, seed: int):
    """Noisy 28x28 images of one of ten fixed random patterns; the label
    is the pattern. Classes follow a Zipf law, as labels often do."""
    rng = np.random.default_rng(seed)
    patterns = rng.normal(size=(CLASSES, SIDE, SIDE, 1))
    labels = training.zipf_ids(rng, CLASSES, num)
    noise = rng.normal(scale=2.0, size=(num, SIDE, SIDE, 1))
    return (patterns[labels] + noise).astype("float32"), labels


def read_images(path: str):
    """An `.npz` file with `x` (images, `[n, height, width, channels]`)
    and `y` (integer labels)."""
    with np.load(path) as f:
        if "x" not in f or "y" not in f:
            raise ValueError(
                "--data must be an .npz file with arrays `x` and `y`. "
                f"Received arrays {sorted(f.keys())} in {path}."
            )
        x, y = f["x"].astype("float32"), f["y"].astype("int64")
    if x.ndim != 4 or len(x) != len(y):
        raise ValueError(
            "`x` must be [n, height, width, channels] and `y` [n]. "
            f"Received: x.shape={x.shape}, y.shape={y.shape} in {path}."
        )
    return x, y


@dataclasses.dataclass(frozen=True)
class Config(training.CommonConfig):
    """Everything `train` takes: `main.py` builds it from its flags."""

    learning_rate: float = 0.001


def train(config: Config) -> dict:
    """Trains the CNN.

    Returns:
        Dict with `loss`, `accuracy`, `val_loss` and `val_accuracy` per
        epoch (the held-out last 10% of the images), `workers`, `chief`
        (whether this process is rank 0) and `sparse` (the number of
        partitioned variables, 0 here).
    """
    steps, batch_size, epochs = config.steps, config.batch_size, config.epochs
    data, learning_rate, seed = config.data, config.learning_rate, config.seed
    model_dir, log_dir = config.model_dir, config.log_dir
    step_log = config.step_log
    keras.utils.set_random_seed(seed)
    strategy = keras_hybrid.HybridStrategy()  # keras_hybrid:
    if data:
        x, y = read_images(data)
    else:
        x, y = synthetic_images(int(steps * batch_size / 0.9) + 1, seed)
    split = int(0.9 * len(y))
    if steps:
        split = min(split, steps * batch_size)
    with strategy.scope():  # keras_hybrid:
        model = build_model(int(y.max()) + 1, x.shape[1:])
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    writes = strategy.is_chief  # keras_hybrid: rank 0 writes the logs
    history = model.fit(
        x[:split],
        y[:split],
        batch_size=batch_size,
        epochs=epochs,
        validation_data=(x[split:], y[split:]),
        callbacks=training.callbacks(model_dir, log_dir, step_log, writes),
    ).history
    if strategy.is_chief:  # keras_hybrid: one rank reports
        # Placement is final once a step was traced: kind, reason, bytes.
        logging.info("Routing plan:\n%s", strategy.plan)
    keys = ("loss", "accuracy", "val_loss", "val_accuracy")
    out = {k: history.get(k, []) for k in keys}
    out.update(
        workers=strategy.size,  # keras_hybrid:
        chief=strategy.is_chief,  # keras_hybrid:
        sparse=len(strategy.plan.of_kind("sparse")),
    )
    return out
