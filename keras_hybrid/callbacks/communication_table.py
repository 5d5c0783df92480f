"""`CommunicationStats`' columns, log entries and tables, without
TensorFlow: the benchmark reads them in a process that does not start
it."""

import numpy as np

from keras_hybrid.utils.traffic_paths import PATHS

PREFIX = "comm_"
# Columns of the vector each rank contributes to a report, in this order
# on every rank (cross-rank reductions go in a fixed order).
_COLUMNS = (
    *(f"{path}_sent_bytes" for path in PATHS),
    *(f"{path}_received_bytes" for path in PATHS),
    "rows_served",
    "step_time_ms",
)


def logs_from(per_rank: np.ndarray) -> dict[str, float]:
    """The `comm_*` log entries from a `[workers, columns]` array.

    Args:
        per_rank: Float array `[workers, len(_COLUMNS)]` of per-step values.

    Returns:
        Dict of log name to float.
    """
    mean = per_rank.mean(axis=0)
    out = {PREFIX + c: float(v) for c, v in zip(_COLUMNS, mean, strict=True)}
    del out[PREFIX + "rows_served"]
    sent = per_rank[:, : len(PATHS)].sum()
    out[PREFIX + "total_sent_bytes"] = float(sent / len(per_rank))
    padding = per_rank[:, PATHS.index("padding")].sum()
    out[PREFIX + "padding_share"] = float(padding / sent) if sent else 0.0
    rows = per_rank[:, _COLUMNS.index("rows_served")]
    out[PREFIX + "shard_imbalance"] = (
        float(rows.max() / rows.mean()) if rows.mean() else 0.0
    )
    return out


def format_table(per_rank: np.ndarray) -> str:
    """One row per worker: bytes sent per path, received, rows, ms/step."""
    header = ["rank", *PATHS, "received", "rows_served", "ms/step"]
    rows = [header]
    received = slice(len(PATHS), 2 * len(PATHS))
    for rank, values in enumerate(per_rank):
        rows.append(
            [
                str(rank),
                *(f"{v:.0f}" for v in values[: len(PATHS)]),
                f"{values[received].sum():.0f}",
                f"{values[-2]:.1f}",
                f"{values[-1]:.1f}",
            ]
        )
    return align_rows(rows)


def format_resizes(resizes: list) -> str:
    """One row per elastic resize: when, why, sizes, bytes and stall
    (`table_wire`: the table rows' bytes on the wire, padding included;
    `cut short`: a lost worker ended the resize's first step, so it has no
    stall)."""
    rows = [
        ["step", "reason", "old", "new", "bytes_moved", "table_wire", "stall_s"]
    ]
    for event in resizes:
        rows.append(
            [
                str(event["global_step"]),
                event["reason"],
                str(event["old_size"]),
                str(event["new_size"]),
                str(event["bytes_moved"]),
                str(event.get("table_wire_bytes", 0)),
                "cut short"
                if event["stall_seconds"] is None
                else f"{event['stall_seconds']:.3f}",
            ]
        )
    return align_rows(rows)


def align_rows(rows: list) -> str:
    """Right-aligned columns of strings; a rule under the first row."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        " ".join(c.rjust(w) for c, w in zip(r, widths, strict=True))
        for r in rows
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])
