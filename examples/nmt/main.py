"""Attention seq2seq translation on one or N processes.

    python examples/nmt/main.py
    keras-hybrid-run -np 2 python examples/nmt/main.py

Without `--data`, sentences are synthetic: Zipf-distributed source words,
translated word by word through a fixed dictionary and reversed. With
`--data`, a file of `source<TAB>target` lines. Rank 0 logs held-out token
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
from examples.nmt import train  # noqa: E402

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
    result = train.train(
        FLAGS.steps,
        FLAGS.batch_size,
        FLAGS.epochs,
        data=FLAGS.data,
        vocab=FLAGS.vocab,
        seq_len=FLAGS.seq_len,
        dim=FLAGS.dim,
        hidden=FLAGS.hidden,
        learning_rate=FLAGS.learning_rate,
        seed=FLAGS.seed,
        model_dir=FLAGS.model_dir,
        log_dir=FLAGS.log_dir,
        step_log=FLAGS.step_log,
    )
    if result["chief"]:
        logging.info(
            "%d worker(s); held-out token accuracy per epoch: %s",
            result["workers"],
            ", ".join(f"{a:.3f}" for a in result["val_accuracy"]),
        )


if __name__ == "__main__":
    app.run(main)
