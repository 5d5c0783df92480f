"""DLRM-style recommender on one or N processes.

    python examples/recommender/main.py
    keras-hybrid-run -np 2 python examples/recommender/main.py

Several categorical features, each with its own partitioned table, plus
dense features. Without `--data`, clicks are synthetic (Zipf ids); with
`--data`, a CSV file of `label,dense...,ids...` rows. Rank 0 logs the
held-out AUC per epoch.
"""

from absl import app
from absl import flags
from absl import logging

# Run as a script (`python examples/recommender/main.py`, or from a copy of this
# folder) its siblings are top-level modules; as `-m examples.recommender.main`,
# modules of the package.
if __package__:
    from . import train
    from . import training
else:
    import train
    import training


FLAGS = flags.FLAGS
training.define_common_flags(steps=100, batch_size=256, epochs=3)
flags.DEFINE_integer(
    "num_dense", 13, "Number of dense features.", lower_bound=1
)
flags.DEFINE_list(
    "vocab_sizes",
    ["100000", "20000", "5000", "500"],
    "Rows of each categorical feature's table.",
)
flags.DEFINE_integer("dim", 16, "Embedding width.", lower_bound=1)
flags.DEFINE_float("learning_rate", 0.005, "Adam learning rate.")


def _vocab_sizes(values: list[str]) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in values)
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise app.UsageError(
            "`--vocab_sizes` must be a comma-separated list of positive "
            f"integers. Received: --vocab_sizes={','.join(values)}"
        )
    return sizes


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    result = train.train(
        training.config_from_flags(
            train.Config, vocab_sizes=_vocab_sizes(FLAGS.vocab_sizes)
        )
    )
    if result["chief"]:
        logging.info(
            "%d worker(s); held-out AUC per epoch: %s",
            result["workers"],
            ", ".join(f"{a:.3f}" for a in result["val_auc"]),
        )


if __name__ == "__main__":
    app.run(main)
