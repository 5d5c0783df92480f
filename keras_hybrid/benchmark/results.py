"""From the workers' per-rank JSON files to one result per mode, and plots.

A result (one entry of the CLI's `results` list):

- `samples_per_sec`: global batch x steps / sum over steps of the slowest
  rank's step time;
- `step_time_ms`: median and 90th percentile of the slowest rank's time,
  step by step;
- `bytes_per_step`: bytes one worker sends per step (mean over workers),
  by path; `total` includes `control` (metrics, capacities);
- `received_bytes_per_step`: the same for bytes received;
- `lower_bound_bytes_per_step`: the traffic model's bound (mean over
  workers), see `traffic_bound`;
- `padding_share`, `shard_imbalance`: as in `CommunicationStats`;
- `calls_per_step`: collectives one worker issues per step, by path
  (rank 0; `control` includes metric reductions), and `sparse`, the sum
  of `ids`, `sparse_pull` and `sparse_push`;
- `cross_host_sparse_bytes_per_step`: sparse bytes (ids, pulls, pushes,
  their padding included) one worker sends to workers on other hosts per
  step (mean over workers; 0 on one host), and `hierarchical`, whether the
  hierarchical exchange ran;
- `interface_bytes_per_step`: what the workers' `eth0` interfaces sent
  per step (mean over workers; headers included), or `None` when workers
  share an interface or run on loopback.
"""

import json
import os

import numpy as np

from keras_hybrid.callbacks.communication_table import align_rows
from keras_hybrid.callbacks.communication_table import logs_from
from keras_hybrid.utils.traffic_paths import PATHS

BYTE_PATHS = ("dense", "sparse_pull", "sparse_push", "ids", "padding")
SPARSE = ("ids", "sparse_pull", "sparse_push")


def read_ranks(out_dir: str, num_workers: int) -> list[dict]:
    """Every rank's `rank<r>.json`, in rank order.

    Raises:
        FileNotFoundError: If a rank left no result (it names the rank).
    """
    ranks = []
    for rank in range(num_workers):
        path = os.path.join(out_dir, f"rank{rank}.json")
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"Worker {rank} wrote no result ({path}); see its output "
                "above (lines prefixed with its rank)."
            )
        with open(path) as f:
            ranks.append(json.load(f))
    return ranks


def summarize(mode: str, ranks: list[dict]) -> dict:
    """One mode's result from its ranks' files (see module docstring)."""
    step = np.max([r["step_seconds"] for r in ranks], axis=0)
    per_rank = np.asarray(ranks[0]["comm"]["per_rank"])
    columns = ranks[0]["comm"]["columns"]
    sent = {p: per_rank[:, columns.index(f"{p}_sent_bytes")] for p in PATHS}
    received = {
        p: per_rank[:, columns.index(f"{p}_received_bytes")] for p in PATHS
    }
    logs = logs_from(per_rank)
    result = {
        "mode": mode,
        "samples_per_sec": float(
            ranks[0]["global_batch"] * len(step) / step.sum()
        ),
        "step_time_ms": {
            "median": float(1e3 * np.median(step)),
            "p90": float(1e3 * np.percentile(step, 90)),
        },
        "bytes_per_step": _by_path(sent),
        "received_bytes_per_step": _by_path(received),
        "lower_bound_bytes_per_step": float(
            np.mean([r["lower_bound_bytes"] for r in ranks])
        ),
        "padding_share": logs["comm_padding_share"],
        "shard_imbalance": logs["comm_shard_imbalance"],
    }
    interface = [r.get("interface_bytes") for r in ranks]
    result["interface_bytes_per_step"] = (
        float(np.mean([i["sent"] for i in interface]))
        if all(interface)
        else None
    )
    if "cross_host_bytes_per_step" in ranks[0]:
        result["cross_host_sparse_bytes_per_step"] = float(
            np.mean(
                [
                    sum(r["cross_host_bytes_per_step"][p] for p in SPARSE)
                    for r in ranks
                ]
            )
        )
        result["hierarchical"] = ranks[0]["hierarchical"]
    calls = ranks[0].get("calls_per_step")
    if calls is not None:
        sparse = sum(calls[p] for p in ("ids", "sparse_pull", "sparse_push"))
        result["calls_per_step"] = {**calls, "sparse": sparse}
    if "overhead" in ranks[0]:
        result["callback_overhead"] = ranks[0]["overhead"]
    return result


def merge_repeats(runs: list[dict]) -> dict:
    """One result from repeated runs of a mode: the run with the median
    samples/s, with every run's samples/s under `samples_per_sec_runs`.
    Byte counts do not depend on the run (same data, same steps)."""
    speeds = [r["samples_per_sec"] for r in runs]
    median = sorted(range(len(runs)), key=speeds.__getitem__)[len(runs) // 2]
    merged = dict(runs[median])
    for r in runs:
        if "callback_overhead" in r:
            merged["callback_overhead"] = r["callback_overhead"]
    if len(runs) > 1:
        merged["samples_per_sec_runs"] = speeds
    return merged


def _by_path(values: dict) -> dict:
    out = {"total": float(sum(v.mean() for v in values.values()))}
    out.update({p: float(values[p].mean()) for p in BYTE_PATHS})
    return out


def table(results: list[dict]) -> str:
    """A text table of the results, one line per mode, with ratios."""
    header = (
        "mode",
        "samples/s",
        "median_ms",
        "p90_ms",
        "sent_kB/step",
        "bound_kB",
        "x_bound",
        "iface/sent",
        "sparse_colls",
        "ctrl_colls",
        "busiest/mean",
    )
    rows = [header]
    for r in results:
        total = r["bytes_per_step"]["total"]
        bound = r["lower_bound_bytes_per_step"]
        rows.append(
            (
                r["mode"],
                f"{r['samples_per_sec']:.1f}",
                f"{r['step_time_ms']['median']:.1f}",
                f"{r['step_time_ms']['p90']:.1f}",
                f"{total / 1e3:.1f}",
                f"{bound / 1e3:.1f}",
                f"{total / bound:.2f}" if bound else "-",
                _interface_ratio(r),
                *_calls(r),
                f"{r['shard_imbalance']:.2f}" if r["shard_imbalance"] else "-",
            )
        )
    return align_rows(rows)


def _calls(result: dict) -> tuple:
    """Sparse (ids, pull, push) and control collectives per step."""
    calls = result.get("calls_per_step")
    if not calls:
        return ("-", "-")
    return (f"{calls['sparse']:.1f}", f"{calls['control']:.1f}")


def _interface_ratio(result: dict) -> str:
    interface = result.get("interface_bytes_per_step")
    total = result["bytes_per_step"]["total"]
    return f"{interface / total:.3f}" if interface and total else "-"


def comparison(results: list[dict], baseline: str = "allgather") -> str:
    """Each mode against `baseline`, side by side: measured speed-up
    (samples/s ratio), byte advantage (ratio of bytes sent per step) and
    the speed-up as a share of the byte advantage. Empty without the
    baseline among `results`."""
    base = next((r for r in results if r["mode"] == baseline), None)
    if base is None:
        return ""
    rows = [("mode", f"speedup_vs_{baseline}", "byte_advantage", "share")]
    for r in results:
        speedup = r["samples_per_sec"] / base["samples_per_sec"]
        advantage = (
            base["bytes_per_step"]["total"] / r["bytes_per_step"]["total"]
        )
        rows.append(
            (
                r["mode"],
                f"{speedup:.2f}",
                f"{advantage:.2f}",
                f"{speedup / advantage:.2f}",
            )
        )
    return align_rows(rows)


def hierarchical_comparison(
    results: list[dict], flat: str = "hybrid_flat"
) -> str:
    """Modes against `flat`, side by side: cross-host sparse bytes per
    step, their ratio (flat over mode: the saving), and the median step
    time ratio (mode over flat: > 1 is slower). Empty without `flat` or
    without cross-host bytes."""
    base = next((r for r in results if r["mode"] == flat), None)
    if base is None or not base.get("cross_host_sparse_bytes_per_step"):
        return ""
    rows = [
        (
            "mode",
            "hierarchical",
            "cross_host_sparse_kB/step",
            f"{flat}/mode_bytes",
            f"step_time/{flat}",
        )
    ]
    base_bytes = base["cross_host_sparse_bytes_per_step"]
    base_ms = base["step_time_ms"]["median"]
    for r in results:
        cross = r.get("cross_host_sparse_bytes_per_step")
        if cross is None:
            continue
        rows.append(
            (
                r["mode"],
                str(r["hierarchical"]),
                f"{cross / 1e3:.1f}",
                f"{base_bytes / cross:.2f}" if cross else "-",
                f"{r['step_time_ms']['median'] / base_ms:.3f}",
            )
        )
    return align_rows(rows)


def plot(report: dict, path: str) -> None:
    """Two bar charts into a PNG: samples/s, and bytes/step by path.

    The traffic chart groups one bar per path beside each other for every
    mode (on a log axis whose ticks are plain numbers, so a 0.4 MB path
    next to a 100 MB one stays visible and readable), marks each mode's
    lower bound, writes its total above it, and keeps the legend inside.

    Raises:
        ImportError: If matplotlib is missing (names the extra to install).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
        from matplotlib import ticker
    except ImportError as error:
        raise ImportError(
            "`--plot` needs matplotlib: pip install "
            "'keras-hybrid[benchmark]' (or matplotlib)."
        ) from error
    results = report["results"]
    names = [r["mode"] for r in results]
    fig, (left, right) = pyplot.subplots(
        1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [2, 3]}
    )
    left.bar(names, [r["samples_per_sec"] for r in results], color="C0")
    left.set_ylabel("samples / s")
    left.set_title("throughput")
    _traffic_bars(right, results, ticker)
    netem = report["netem"] or "loopback"
    fig.suptitle(f"{report['workload']}, {report['workers']} workers, {netem}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot.close(fig)


def _traffic_bars(axes, results: list, ticker) -> None:
    """Grouped bars of MB per path and mode, with bounds and totals."""
    paths = [
        p for p in BYTE_PATHS if any(r["bytes_per_step"][p] for r in results)
    ]
    width = 0.8 / max(1, len(paths))
    positions = np.arange(len(results))
    for i, p in enumerate(paths):
        mb = np.array([r["bytes_per_step"][p] / 1e6 for r in results])
        shown = mb > 0
        axes.bar(
            positions[shown] - 0.4 + (i + 0.5) * width,
            mb[shown],
            width,
            label=p,
            color=f"C{BYTE_PATHS.index(p) + 1}",
        )
    totals = [sum(r["bytes_per_step"][p] for p in paths) / 1e6 for r in results]
    for x, total, r in zip(positions, totals, results, strict=True):
        bound = r["lower_bound_bytes_per_step"] / 1e6
        axes.hlines(bound, x - 0.45, x + 0.45, colors="k", linestyles="--")
        axes.annotate(
            f"total {total:.3g} MB",
            (x, max(total, bound)),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            fontsize="small",
        )
    axes.plot([], [], "k--", label="sparse lower bound")
    axes.set_xticks(positions, [r["mode"] for r in results])
    axes.set_yscale("log")
    low = min(
        [t for t in totals if t > 0]
        + [
            r["bytes_per_step"][p] / 1e6
            for r in results
            for p in paths
            if r["bytes_per_step"][p]
        ]
    )
    # Room above the tallest bar for its total and the legend.
    axes.set_ylim(low / 3, max(totals) * 40)
    axes.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 3.0)))
    axes.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axes.yaxis.set_minor_formatter(ticker.NullFormatter())
    axes.grid(axis="y", which="major", alpha=0.3)
    axes.set_ylabel("MB sent per worker and step")
    axes.set_title("traffic by path")
    axes.legend(fontsize="small", loc="upper left", ncol=3, frameon=True)
