"""Draws docs/images/architecture.png (matplotlib; run from the repo root).

python docs/images/architecture.py
"""

import matplotlib

matplotlib.use("Agg")
from matplotlib import patches  # noqa: E402
from matplotlib import pyplot  # noqa: E402

DENSE = "#cfe2f3"
SHARD = "#f9cb9c"
BATCH = "#d9ead3"


def box(axes, x, y, w, h, text, color, size=9):
    axes.add_patch(
        patches.FancyBboxPatch(
            (x, y), w, h, boxstyle="round,pad=0.02", fc=color, ec="black"
        )
    )
    axes.text(x + w / 2, y + h / 2, text, ha="center", va="center", size=size)


def arrow(axes, start, end, text="", color="black", style="-|>"):
    axes.annotate(
        "",
        xy=end,
        xytext=start,
        arrowprops=dict(arrowstyle=style, color=color, lw=1.6),
    )
    if text:
        mid = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        axes.text(*mid, text, ha="center", va="bottom", size=8, color=color)


def worker(axes, x, rank):
    axes.add_patch(
        patches.Rectangle((x, 0.6), 3.6, 5.2, fc="white", ec="gray", ls="--")
    )
    axes.text(x + 1.8, 5.55, f"worker process, rank {rank}", ha="center")
    box(
        axes,
        x + 0.2,
        4.3,
        3.2,
        0.8,
        f"batch slice {rank} (ids, features)",
        BATCH,
    )
    box(
        axes,
        x + 0.2,
        2.7,
        3.2,
        1.2,
        "dense variables (replica)\nLSTM, Dense kernels, biases",
        DENSE,
    )
    box(
        axes,
        x + 0.2,
        0.9,
        3.2,
        1.3,
        f"table shard {rank}\nrows with p(id) % N == {rank}\n+ optimizer slots",
        SHARD,
    )


def main():
    figure, axes = pyplot.subplots(figsize=(10, 5.6))
    worker(axes, 0.2, 0)
    worker(axes, 6.2, 1)
    blue, orange = "#1f4e79", "#b45f06"
    arrow(axes, (3.6, 3.3), (6.4, 3.3), "", blue, "<|-|>")
    axes.text(
        5.0,
        3.45,
        "all-reduce of\ndense gradients",
        ha="center",
        color=blue,
        size=8,
    )
    arrow(axes, (3.6, 4.5), (6.4, 1.8), "", orange, "<|-|>")
    arrow(axes, (6.4, 4.5), (3.6, 1.8), "", orange, "<|-|>")
    axes.text(
        5.0,
        4.75,
        "pull rows / push gradient rows\n"
        "(all-to-all, only ids the batch touches)",
        ha="center",
        color=orange,
        size=8,
    )
    # A worker's own rows never cross the network.
    arrow(axes, (0.3, 4.3), (0.3, 2.2), "", orange, "<|-|>")
    arrow(axes, (9.7, 4.3), (9.7, 2.2), "", orange, "<|-|>")
    axes.text(
        5.0,
        0.15,
        "Each worker dedupes its ids, pulls the unique rows from their owners, "
        "and pushes one summed gradient row per id back.\n"
        "Owners apply the optimizer to their rows; dense gradients are fused "
        "into buckets and all-reduced.",
        ha="center",
        size=8,
    )
    axes.set_xlim(0, 10)
    axes.set_ylim(-0.2, 6)
    axes.axis("off")
    figure.tight_layout()
    figure.savefig("docs/images/architecture.png", dpi=100)


if __name__ == "__main__":
    main()
