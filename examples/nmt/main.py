"""Attention seq2seq translation on one or N processes.

    python examples/nmt/main.py
    keras-hybrid-run -np 2 python examples/nmt/main.py

Without `--data`, sentences are synthetic: Zipf-distributed source words,
translated word by word through a fixed dictionary and reversed. With
`--data`, a file of `source<TAB>target` lines. Rank 0 logs held-out token
accuracy per epoch.
"""

from absl import app
from absl import flags
from absl import logging

# Run as a script (`python examples/nmt/main.py`, or from a copy of this
# folder) its siblings are top-level modules; as `-m examples.nmt.main`,
# modules of the package.
if __package__:
    from . import train
    from . import training
else:
    import train
    import training


FLAGS = flags.FLAGS
training.define_common_flags(steps=100, batch_size=64, epochs=3)
flags.DEFINE_integer(
    "vocab", 5_000, "Vocabulary size of each side.", lower_bound=4
)
flags.DEFINE_integer("seq_len", 12, "Words per sentence.", lower_bound=1)
flags.DEFINE_integer("dim", 64, "Embedding width.", lower_bound=1)
flags.DEFINE_integer("hidden", 128, "LSTM units.", lower_bound=1)
flags.DEFINE_float("learning_rate", 0.005, "Adam learning rate.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    result = train.train(training.config_from_flags(train.Config))
    if result["chief"]:
        logging.info(
            "%d worker(s); held-out token accuracy per epoch: %s",
            result["workers"],
            ", ".join(f"{a:.3f}" for a in result["val_accuracy"]),
        )


if __name__ == "__main__":
    app.run(main)
