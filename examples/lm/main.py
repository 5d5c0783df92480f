"""Word-level language model (LM1B-shaped) on one or N processes.

    python examples/lm/main.py
    keras-hybrid-run -np 2 python examples/lm/main.py --batch_size=64
    python examples/lm/corpus.py --out=/tmp/corpus.txt
    python examples/lm/main.py --data=/tmp/corpus.txt --epochs=5

Without `--data` the tokens are synthetic (Zipf ids with a learnable
dependence on the previous token); with `--data`, a plain text file is
split on white space. Rank 0 logs the held-out perplexity per epoch.
"""

from absl import app
from absl import flags
from absl import logging

# Run as a script (`python examples/lm/main.py`, or from a copy of this
# folder) its siblings are top-level modules; as `-m examples.lm.main`,
# modules of the package.
if __package__:
    from . import train
    from . import training
else:
    import train
    import training


FLAGS = flags.FLAGS
training.define_common_flags(steps=100, batch_size=64, epochs=3)
flags.DEFINE_integer("vocab", 10_000, "Vocabulary size.", lower_bound=2)
flags.DEFINE_integer("seq_len", 20, "Tokens per sequence.", lower_bound=1)
flags.DEFINE_integer("dim", 64, "Embedding width.", lower_bound=1)
flags.DEFINE_integer("hidden", 128, "LSTM units.", lower_bound=1)
flags.DEFINE_integer(
    "num_sampled", 64, "Negative classes sampled per step.", lower_bound=1
)
flags.DEFINE_float("learning_rate", 0.01, "Adam learning rate.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    result = train.train(training.config_from_flags(train.Config))
    if result["chief"]:
        logging.info(
            "%d worker(s), vocabulary %d; held-out perplexity per epoch: %s",
            result["workers"],
            result["vocab"],
            ", ".join(f"{p:.1f}" for p in result["val_perplexity"]),
        )


if __name__ == "__main__":
    app.run(main)
