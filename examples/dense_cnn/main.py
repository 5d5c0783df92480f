"""A small CNN with only dense variables, on one or N processes.

    python examples/dense_cnn/main.py
    keras-hybrid-run -np 2 python examples/dense_cnn/main.py

Without `--data`, images are synthetic (noisy fixed patterns); with
`--data`, an `.npz` file with arrays `x` and `y`. Rank 0 logs held-out
accuracy per epoch.
"""

import pathlib
import sys

from absl import app
from absl import flags
from absl import logging

# examples/common is shared by the examples: make `examples.*` importable.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from examples.common import training  # noqa: E402
from examples.dense_cnn import train  # noqa: E402

FLAGS = flags.FLAGS
training.define_common_flags(steps=50, batch_size=64, epochs=3)
flags.DEFINE_float("learning_rate", 0.001, "Adam learning rate.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    result = train.train(
        FLAGS.steps,
        FLAGS.batch_size,
        FLAGS.epochs,
        data=FLAGS.data,
        learning_rate=FLAGS.learning_rate,
        seed=FLAGS.seed,
        model_dir=FLAGS.model_dir,
        log_dir=FLAGS.log_dir,
        step_log=FLAGS.step_log,
    )
    if result["chief"]:
        logging.info(
            "%d worker(s); held-out accuracy per epoch: %s",
            result["workers"],
            ", ".join(f"{a:.3f}" for a in result["val_accuracy"]),
        )


if __name__ == "__main__":
    app.run(main)
