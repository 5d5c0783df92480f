"""Predictions against measured benchmark runs (emulated network).

A benchmark JSON (`python -m keras_hybrid.benchmark`) holds, per mode, the
median step time and the bytes a worker sent per step and path, for one
workload, worker count and `netem` setting (`"RATE:DELAY"` in tc units,
e.g. `"1gbit:50us"`, every worker in its own network namespace: one
worker per host). Compute and communication are separated so that CPU
contention on a small machine does not count as network time:

- with a `baseline` run (the same runs on plain loopback), measured
  communication = step time with netem - step time without, and the
  prediction is the time the emulated network adds (the simulator's
  communication time, which is 0 on an infinitely fast network);
- otherwise measured communication = step time - the profile's compute
  time.

Bytes compare everything but `control` (metrics and loss all-reduces,
which the simulator leaves out).
"""

import dataclasses
import json

from keras_hybrid.costs import cluster_spec
from keras_hybrid.costs import cost_model
from keras_hybrid.costs import traffic
from keras_hybrid.costs.design import Design

COMPARED_PATHS = ("dense", "sparse_pull", "sparse_push", "ids", "padding")


def load_benchmark(path: str) -> dict:
    """Reads a benchmark JSON.

    Raises:
        ValueError: If it lacks `workers`, `netem` or `results`.
    """
    with open(path) as f:
        body = json.load(f)
    missing = [k for k in ("workers", "netem", "results") if k not in body]
    if missing:
        raise ValueError(
            f"{path!r} is not a benchmark JSON: it lacks {missing}. "
            "Write one with `python -m keras_hybrid.benchmark`."
        )
    return body


def spec_of(benchmark: dict) -> cluster_spec.ClusterSpec:
    """The cluster a benchmark emulated: one worker per namespace."""
    netem = benchmark["netem"]
    if not netem:
        raise ValueError(
            "The measured run must use network emulation (`--netem`). "
            f"Received: netem={netem!r}"
        )
    rate, _, delay = str(netem).partition(":")
    return cluster_spec.ClusterSpec(
        workers=int(benchmark["workers"]),
        accelerators_per_host=1,
        inter_bandwidth=cluster_spec.parse_rate(rate),
        inter_latency=cluster_spec.parse_time(delay or "0"),
    )


def _error(predicted: float, measured: float):
    return predicted / measured - 1 if measured else None


# Benchmark modes the simulator models with a fixed exchange option:
# `hybrid_padded` is the hybrid with every all-to-all block padded to the
# largest pair (one `AllToAllV2`), `hybrid_per_call` the hybrid with one
# exchange per table and lookup call (no fused exchange), `hybrid_rounds`
# the hybrid with its all-to-alls in rounds.
_FIXED_OPTIONS = {
    "hybrid_padded": ("hybrid", {"padding": "max_pair"}),
    "hybrid_per_call": ("hybrid", {"fused": False}),
    "hybrid_rounds": ("hybrid", {"schedule": "rounds"}),
}


def compare(
    profile, measured, batch, baseline=None, bucket_bytes=None, design=None
):
    """One comparison per mode of `measured` that the simulator models.

    Args:
        profile: A `Profile`.
        measured: A benchmark JSON (`load_benchmark`).
        batch: Int. Samples per worker and step.
        baseline: The same runs on loopback, or `None`.
        bucket_bytes: Int, or `None` for the default.
        design: The `Design` of the measured `hybrid` exchange (default:
            `Design()`); a measured `hybrid_padded` is always compared
            with `padding="max_pair"`, a `hybrid_per_call` with
            `fused=False`, a `hybrid_rounds` with `schedule="rounds"`.

    Returns:
        List of dicts: workers, mode, netem, predicted and measured bytes
        (without `control`) and communication ms, and their errors.
    """
    spec = spec_of(measured)
    base = {}
    if baseline is not None:
        base = {r["mode"]: r for r in baseline["results"]}
    kwargs = {"bucket_bytes": bucket_bytes} if bucket_bytes else {}
    design = design or Design()
    out = []
    for result in measured["results"]:
        mode = result["mode"]
        model, used = mode, design
        if mode in _FIXED_OPTIONS:
            model, options = _FIXED_OPTIONS[mode]
            used = dataclasses.replace(design, **options)
        if model not in traffic.MODES:
            continue
        pred = cost_model.predict(
            profile, model, spec, batch, design=used, **kwargs
        )
        pred_bytes = sum(pred.bytes[p] for p in COMPARED_PATHS)
        sent = result["bytes_per_step"]
        meas_bytes = sum(sent.get(p, 0) for p in COMPARED_PATHS)
        step = result["step_time_ms"]["median"]
        if mode in base:
            meas_comm = step - base[mode]["step_time_ms"]["median"]
        else:
            meas_comm = step - 1e3 * pred.compute_seconds
        pred_comm = 1e3 * pred.comm_seconds
        out.append(
            {
                "workers": spec.workers,
                "mode": mode,
                "netem": measured["netem"],
                "compute_from": "baseline" if mode in base else "profile",
                "predicted_bytes": pred_bytes,
                "measured_bytes": meas_bytes,
                "bytes_error": _error(pred_bytes, meas_bytes),
                "predicted_comm_ms": pred_comm,
                "measured_comm_ms": meas_comm,
                "comm_error": _error(pred_comm, meas_comm),
            }
        )
    return out


def table(checks) -> str:
    """The comparisons as a text table."""
    header = (
        f"{'workers':>7} {'mode':>13} {'pred kB':>10} {'meas kB':>10} "
        f"{'error':>7} {'pred ms':>8} {'meas ms':>8} {'error':>7}"
    )
    lines = [header, "-" * len(header)]
    for c in checks:
        lines.append(
            f"{c['workers']:>7} {c['mode']:>13} "
            f"{c['predicted_bytes'] / 1e3:>10.1f} "
            f"{c['measured_bytes'] / 1e3:>10.1f} {_pct(c['bytes_error'])} "
            f"{c['predicted_comm_ms']:>8.2f} {c['measured_comm_ms']:>8.2f} "
            f"{_pct(c['comm_error'])}"
        )
    return "\n".join(lines)


def _pct(x) -> str:
    return f"{'-':>7}" if x is None else f"{100 * x:>+6.1f}%"
