"""A small CNN with only dense variables, on one or N processes.

    python examples/dense_cnn/main.py
    keras-hybrid-run -np 2 python examples/dense_cnn/main.py

Without `--data`, images are synthetic (noisy fixed patterns); with
`--data`, an `.npz` file with arrays `x` and `y`. Rank 0 logs held-out
accuracy per epoch.
"""

from absl import app
from absl import flags
from absl import logging

# Run as a script (`python examples/dense_cnn/main.py`, or from a copy of this
# folder) its siblings are top-level modules; as `-m examples.dense_cnn.main`,
# modules of the package.
if __package__:
    from . import train
    from . import training
else:
    import train
    import training


FLAGS = flags.FLAGS
training.define_common_flags(steps=50, batch_size=64, epochs=3)
flags.DEFINE_float("learning_rate", 0.001, "Adam learning rate.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    result = train.train(training.config_from_flags(train.Config))
    if result["chief"]:
        logging.info(
            "%d worker(s); held-out accuracy per epoch: %s",
            result["workers"],
            ", ".join(f"{a:.3f}" for a in result["val_accuracy"]),
        )


if __name__ == "__main__":
    app.run(main)
