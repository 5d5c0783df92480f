"""Tables in the style of the Parallax paper's comparison, and a plot."""

from keras_hybrid.costs import traffic

LABELS = {
    "hybrid": "hybrid",
    "ps_only": "PS-only",
    "dense": "all-reduce",
    "allgather": "all-gather",
}


def _grid(predictions) -> tuple[list, list, dict]:
    workers = sorted({p.workers for p in predictions})
    modes = [m for m in traffic.MODES if any(p.mode == m for p in predictions)]
    cell = {(p.workers, p.mode): p for p in predictions}
    return workers, modes, cell


def _render(header, rows) -> str:
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [
        "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True))
        for r in cells
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def comparison_table(predictions) -> str:
    """Throughput per mode and worker count, and hybrid's speed-up.

    As in the Parallax paper's comparison (Kim et al., EuroSys 2019): one
    row per cluster size, one column per architecture, and the speed-up
    of the hybrid over each other one.
    """
    workers, modes, cell = _grid(predictions)
    others = [m for m in modes if m != "hybrid"]
    header = ["workers", *(LABELS[m] for m in modes)]
    if "hybrid" in modes:
        header += [f"x{LABELS[m]}" for m in others]
    rows = []
    for n in workers:
        row = [str(n)] + [f"{cell[n, m].samples_per_sec:,.0f}" for m in modes]
        if "hybrid" in modes:
            hybrid = cell[n, "hybrid"].samples_per_sec
            row += [
                f"{hybrid / cell[n, m].samples_per_sec:.2f}" for m in others
            ]
        rows.append(row)
    return _render(header, rows)


def cost_table(predictions) -> str:
    """Communication ms and MB sent per worker per step, per mode."""
    workers, modes, cell = _grid(predictions)
    header = ["workers"]
    header += [f"{LABELS[m]} ms" for m in modes]
    header += [f"{LABELS[m]} MB" for m in modes]
    rows = []
    for n in workers:
        row = [str(n)]
        row += [f"{1e3 * cell[n, m].comm_seconds:.2f}" for m in modes]
        row += [f"{cell[n, m].bytes['total'] / 1e6:.3f}" for m in modes]
        rows.append(row)
    return _render(header, rows)


def plot(predictions, path: str, title: str = "") -> None:
    """Writes a PNG: throughput and communication time over workers."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    workers, modes, cell = _grid(predictions)
    fig, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    for m in modes:
        left.plot(
            workers,
            [cell[n, m].samples_per_sec for n in workers],
            marker="o",
            label=LABELS[m],
        )
        right.plot(
            workers,
            [1e3 * cell[n, m].comm_seconds for n in workers],
            marker="o",
            label=LABELS[m],
        )
    for ax, ylabel in (
        (left, "samples / s"),
        (right, "communication ms / step"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(workers, [str(n) for n in workers])
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    left.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot.close(fig)


def ablation_table(rows) -> str:
    """`rows` of `(workers, label, {mode: Prediction})`: the hybrid's
    communication ms (and its latency part), padding share of its sparse
    bytes, cross-host sparse MB per host, and the baselines' ms."""
    header = [
        "workers",
        "hybrid exchange",
        "hybrid ms",
        "latency ms",
        "padding",
        "x-host MB",
        "all-gather ms",
        "all-reduce ms",
        "xall-gather",
        "xall-reduce",
    ]
    out = []
    for workers, label, found in rows:
        hybrid = found["hybrid"]
        sparse = sum(
            hybrid.bytes[p]
            for p in ("ids", "sparse_pull", "sparse_push", "padding")
        )
        share = hybrid.bytes["padding"] / sparse if sparse else 0.0
        gather, dense = found["allgather"], found["dense"]
        out.append(
            [
                str(workers),
                label,
                f"{1e3 * hybrid.comm_seconds:.2f}",
                f"{1e3 * hybrid.latency_seconds:.2f}",
                f"{100 * share:.1f}%",
                f"{hybrid.cross_host_sparse_bytes / 1e6:.2f}",
                f"{1e3 * gather.comm_seconds:.2f}",
                f"{1e3 * dense.comm_seconds:.2f}",
                f"{gather.comm_seconds / hybrid.comm_seconds:.2f}",
                f"{dense.comm_seconds / hybrid.comm_seconds:.2f}",
            ]
        )
    return _render(header, out)
