"""Network-scaled runs: the scaled link, and what the target cluster allows.

A network-scaled run (`--target_step_ms`, `--target_bandwidth`) measures
this machine's compute time per step `T_here` with unlimited links, then
limits every link to `target_bandwidth x target_step_ms / T_here`, so that
communication takes the share of a step it takes on the target cluster.

On the target, a mode whose step sends and receives its bytes in `m` ms
of wire time takes at best `C + m` ms, with `C = target_step_ms` (no
overlap of compute and communication). Against a baseline with wire time
`a`, the speed-up the target allows from bytes alone is therefore
`(C + a) / (C + m)`, whatever the byte advantage `a / m`: with little
communication the compute `C` caps it. `against_target` puts that ceiling
next to the measured speed-up, so a run shows whether it is at the
ceiling (measured / allowed near 1) or below it.
"""

import numpy as np

from keras_hybrid.callbacks.communication_table import align_rows
from keras_hybrid.emulation import network as netem


def scaled_link(
    calibration: list[dict],
    target_bandwidth: str,
    target_step_ms: float,
    calibration_mode: str,
) -> tuple[netem.NetemSpec, dict]:
    """The link that gives communication the target's share of a step.

    Args:
        calibration: List of dicts. Results (`results.summarize`) of the
            calibration mode with unlimited links; the median of their
            median step times is this machine's compute time per step.
        target_bandwidth: String. The target's link rate, e.g. `"1gbit"`.
        target_step_ms: Float. The target's compute time per step, in ms.
        calibration_mode: String. The calibration mode's name (recorded).

    Returns:
        The scaled link (rate only), and a dict of what was used.
    """
    target = netem.parse(f"{target_bandwidth}:0")
    runs = [r["step_time_ms"]["median"] for r in calibration]
    compute_ms = float(np.median(runs))
    bits = target.bits_per_second * target_step_ms / compute_ms
    spec = netem.NetemSpec(f"{max(1, round(bits / 1e3))}kbit", 0.0)
    scaling = {
        "calibration_mode": calibration_mode,
        "compute_ms_here": compute_ms,
        "compute_ms_runs": runs,
        "target_step_ms": target_step_ms,
        "target_bandwidth": target.rate,
        "time_scale": compute_ms / target_step_ms,
        "emulated_rate": spec.rate,
    }
    return spec, scaling


def wire_ms(result: dict, bits_per_second: float) -> float:
    """Milliseconds a worker's link needs for one step's bytes at
    `bits_per_second`: the larger of what it sends and what it receives
    (mean over workers), as a link is limited both ways."""
    sent = result["bytes_per_step"]["total"]
    received = result["received_bytes_per_step"]["total"]
    return 8e3 * max(sent, received) / bits_per_second


def against_target(
    measured: list[dict], scaling: dict, baseline: str = "allgather"
) -> dict[str, dict]:
    """Per mode, the run against the target cluster.

    Args:
        measured: List of dicts. One result per mode (`results`).
        scaling: Dict. What `scaled_link` returned.
        baseline: String. The mode speed-ups are measured against.

    Returns:
        A dict by mode name of dicts with `target_wire_ms` (wire time of a
        step at the target's rate), `target_comm_share` (its share of a
        step on the target), `measured_comm_share` (step time here above
        the calibration's compute time), and, when `baseline` was
        measured, `speedup` (samples/s over the baseline's),
        `allowed_speedup` ((C + a) / (C + m), see module) and
        `measured_over_allowed`.
    """
    rate = netem.parse(f"{scaling['target_bandwidth']}:0").bits_per_second
    step_ms = scaling["target_step_ms"]
    base = next((r for r in measured if r["mode"] == baseline), None)
    figures = {}
    for r in measured:
        wire = wire_ms(r, rate)
        here_ms = r["step_time_ms"]["median"]
        row = {
            "target_wire_ms": wire,
            "target_comm_share": wire / (wire + step_ms),
            "measured_comm_share": max(
                0.0, 1 - scaling["compute_ms_here"] / here_ms
            ),
        }
        if base is not None:
            speedup = r["samples_per_sec"] / base["samples_per_sec"]
            allowed = (step_ms + wire_ms(base, rate)) / (step_ms + wire)
            row["speedup"] = speedup
            row["allowed_speedup"] = allowed
            row["measured_over_allowed"] = speedup / allowed
        figures[r["mode"]] = row
    return figures


def target_table(figures: dict[str, dict], baseline: str = "allgather") -> str:
    """A text table of `against_target`'s figures, one line per mode."""
    rows = [
        (
            "mode",
            "target_wire_ms",
            "target_comm_share",
            "measured_comm_share",
            f"speedup_vs_{baseline}",
            "allowed_by_bytes",
            "measured/allowed",
        )
    ]
    for mode, f in figures.items():
        speed = [
            f"{f[k]:.2f}" if k in f else "-"
            for k in ("speedup", "allowed_speedup", "measured_over_allowed")
        ]
        rows.append(
            (
                mode,
                f"{f['target_wire_ms']:.2f}",
                f"{f['target_comm_share']:.2f}",
                f"{f['measured_comm_share']:.2f}",
                *speed,
            )
        )
    return align_rows(rows)
