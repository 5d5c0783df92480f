"""Overlays the LM's per-step loss on 1 process and on N workers.

    python -m examples.lm.main --epochs=2 --step_log=/tmp/loss_1.csv
    keras-hybrid-run -np 4 --threads 1 python -m examples.lm.main \\
        --epochs=2 --step_log=/tmp/loss_4.csv
    python examples/lm/plot_convergence.py --one=/tmp/loss_1.csv \\
        --many=/tmp/loss_4.csv --workers=4 \\
        --out=docs/images/lm_convergence.png

Both runs use the same global batch and seed. Prints the largest
difference between the two curves over the steps both ran. Needs
matplotlib (`pip install "keras-hybrid[examples]"`).
"""

import csv

import matplotlib
import numpy as np
from absl import app
from absl import flags

matplotlib.use("Agg")  # files only, no display
from matplotlib import pyplot  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("one", None, "Step log (CSV) of the 1-process run.")
flags.DEFINE_string("many", None, "Step log (CSV) of the N-worker run.")
flags.DEFINE_integer("workers", 4, "N, for the legend.", lower_bound=2)
flags.DEFINE_string("out", "lm_convergence.png", "The PNG to write.")
flags.mark_flags_as_required(["one", "many"])


def read_losses(path: str) -> np.ndarray:
    """The `loss` column of a step log written by `--step_log`."""
    with open(path) as f:
        return np.array([float(row["loss"]) for row in csv.DictReader(f)])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    one, many = read_losses(FLAGS.one), read_losses(FLAGS.many)
    steps = min(len(one), len(many))
    one, many = one[:steps], many[:steps]
    diff = np.abs(one - many)
    figure, axes = pyplot.subplots(figsize=(7, 4))
    x = np.arange(1, steps + 1)
    axes.plot(x, one, label="1 process", lw=2.5)
    axes.plot(
        x,
        many,
        "--",
        label=f"{FLAGS.workers} workers (keras-hybrid-run)",
        lw=1.5,
    )
    axes.set_xlabel("step (global batch)")
    axes.set_ylabel("training loss (sampled softmax)")
    axes.set_title(
        f"LM example, same global batch and seed: max |difference| "
        f"{diff.max():.2g}"
    )
    axes.legend()
    figure.tight_layout()
    figure.savefig(FLAGS.out, dpi=100)
    print(
        f"{steps} steps; max |loss difference| {diff.max():.3g} at step "
        f"{int(diff.argmax()) + 1}; mean {diff.mean():.3g}; wrote {FLAGS.out}"
    )


if __name__ == "__main__":
    app.run(main)
