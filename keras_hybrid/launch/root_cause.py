"""The launcher's last lines after a failed job: the exception that
started it, and the others' errors marked as its consequences."""

from keras_hybrid.launch.worker_output import WorkerException

# Longest message quoted for a consequence.
_SHORT = 160


def root_cause_lines(exceptions: list[WorkerException]) -> list[str]:
    """Lines naming the first cause of a failure and its consequences.

    The cause is the oldest exception that is not a consequence of
    another worker's failure (`WorkerException.is_consequence`: an aborted
    collective, a lost peer, a "stops too"); if every one is, the oldest.

    Args:
        exceptions: List of `WorkerException`, oldest first.

    Returns:
        List of strings, empty without exceptions.

    Example:

    ```python
    root_cause_lines(streams.exceptions())
    # ['the failure started on rank 1: RuntimeError: boom',
    #  '  at train.py:12 in step: raise RuntimeError("boom")',
    #  'rank 0 failed as a consequence: ...']
    ```
    """
    if not exceptions:
        return []
    causes = [e for e in exceptions if not e.is_consequence]
    root = (causes or exceptions)[0]
    lines = [f"the failure started on rank {root.rank}: {root.describe()}"]
    if root.frame:
        lines.append(f"  at {root.frame}")
    seen = {root.rank}
    for error in exceptions:
        if error.rank in seen:
            continue
        seen.add(error.rank)
        if error.is_consequence:
            how = f"as a consequence of rank {root.rank}'s failure"
        else:
            how = "after it" if error.seconds >= root.seconds else "too"
        lines.append(
            f"rank {error.rank} failed {how}: {_short(error.describe())}"
        )
    return lines


def _short(text: str) -> str:
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."
