"""Predicted speed-ups over all-gather against emulated runs whose links
queue 10, 50 or 400 ms.

A network-scaled benchmark run (`python -m keras_hybrid.benchmark
--target_step_ms=... --tbf_queue_ms=Q`) is a small cluster of its own:
one worker per emulated host, links at the scaled rate `R`, a compute
time per step `T` (the calibration run, `compute_ms_here`), and a token
bucket per link that queues `R x Q + burst` bytes
(`emulation.network.tbf_limit_bytes`). The simulator predicts each
mode's step on that cluster, `T` + communication + the timeouts of the
`PortBuffer` model, and from them the speed-up over all-gather: the
figure the benchmark reports against the target cluster
(`speedup_vs_allgather`; `measured / allowed` is the same figure over
the speed-up bytes allow). TCP's timeout is real time (200 ms) in the
emulated run too, so the prediction is made at the emulated rate, not
at the target's.

The runs compared are a JSON file (`load`): per run the worker count,
the tbf queue, the emulated rate, `compute_ms_here`, and per mode the
measured speed-up, with the command that produced it.
"""

import json

from keras_hybrid.costs import cluster_spec
from keras_hybrid.costs import cost_model
from keras_hybrid.costs.design import Design
from keras_hybrid.costs.port_buffer import PortBuffer
from keras_hybrid.emulation import network

TOLERANCE = 0.25
# Benchmark modes compared, and the all-to-all schedule each runs.
SCHEDULES = {"hybrid": "concurrent", "hybrid_rounds": "rounds"}


def load(path: str) -> list[dict]:
    """The runs of a validation file (module doc).

    Raises:
        ValueError: If the file has no `runs` or a run lacks a field.
    """
    with open(path) as f:
        body = json.load(f)
    fields = ("workers", "tbf_queue_ms", "emulated_rate", "compute_ms_here")
    runs = body.get("runs") if isinstance(body, dict) else None
    if not runs:
        raise ValueError(f"{path!r} has no `runs` list of emulated runs.")
    for run in runs:
        missing = [k for k in (*fields, "speedup") if k not in run]
        if missing:
            raise ValueError(
                f"A run of {path!r} lacks {missing}. Received: {run!r}"
            )
    return runs


def emulated_cluster(run: dict, queueing: bool = True):
    """The `ClusterSpec` and `PortBuffer` an emulated run stands for.

    Args:
        run: One run of `load`.
        queueing: Bool. If `False`, the buffer is `None`: ports that
            never drop (the model without queueing and loss).
    """
    rate = cluster_spec.parse_rate(run["emulated_rate"])
    spec = cluster_spec.ClusterSpec(
        workers=int(run["workers"]),
        accelerators_per_host=1,
        inter_bandwidth=rate,
        inter_latency=0.0,
    )
    if not queueing:
        return spec, None
    limit = network.tbf_limit_bytes(8 * rate, run["tbf_queue_ms"])
    return spec, PortBuffer(buffer_bytes=limit)


def predicted_speedups(
    profile, run: dict, batch: int, queueing: bool = True
) -> dict:
    """`{mode: (speed-up over allgather, seconds of timeouts per step)}`
    predicted for `run`, for every mode of `SCHEDULES` (`queueing`: as
    `emulated_cluster`)."""
    spec, port = emulated_cluster(run, queueing)
    compute = run["compute_ms_here"] / 1e3
    steps = {}
    for mode, schedule in (("allgather", "concurrent"), *SCHEDULES.items()):
        pred = cost_model.predict(
            profile,
            "allgather" if mode == "allgather" else "hybrid",
            spec,
            batch,
            buffer=port,
            design=Design(schedule=schedule),
        )
        steps[mode] = (compute + pred.comm_seconds, pred.queue_seconds)
    return {
        mode: (steps["allgather"][0] / steps[mode][0], steps[mode][1])
        for mode in SCHEDULES
    }


def compare(profile, runs, batch: int, queueing: bool = True) -> list:
    """One row per run and measured mode of `SCHEDULES`.

    Args:
        profile: The `Profile` of the runs' workload.
        runs: Runs of `load`.
        batch: Int. Samples per worker and step.
        queueing: Bool. If `False`, predict without the `PortBuffer`
            model (ports that never drop). Defaults to `True`.

    Returns:
        List of dicts: workers, queue ms, mode, predicted and measured
        speed-up, the error (predicted / measured - 1) and the predicted
        ms of timeouts per step.
    """
    rows = []
    for run in runs:
        predicted = predicted_speedups(profile, run, batch, queueing)
        for mode, (speedup, queue) in predicted.items():
            if mode not in run["speedup"]:
                continue
            measured = run["speedup"][mode]
            rows.append(
                {
                    "workers": run["workers"],
                    "tbf_queue_ms": run["tbf_queue_ms"],
                    "mode": mode,
                    "predicted": speedup,
                    "measured": measured,
                    "error": speedup / measured - 1,
                    "queue_ms": 1e3 * queue,
                }
            )
    return rows


def outside(rows, tolerance: float = TOLERANCE) -> list:
    """The rows whose error is beyond `tolerance` either way."""
    return [r for r in rows if abs(r["error"]) > tolerance]


def table(rows) -> str:
    """The rows as a text table."""
    header = (
        f"{'workers':>7} {'queue':>6} {'mode':>14} {'timeouts ms':>11} "
        f"{'predicted':>9} {'measured':>8} {'error':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['workers']:>7} {r['tbf_queue_ms']:>4g}ms {r['mode']:>14} "
            f"{r['queue_ms']:>11.0f} {r['predicted']:>9.2f} "
            f"{r['measured']:>8.2f} {100 * r['error']:>+6.1f}%"
        )
    return "\n".join(lines)
