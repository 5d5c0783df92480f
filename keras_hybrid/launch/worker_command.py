"""One fully resolved worker process to start."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class WorkerCommand:
    """What `WorkerGroup` starts for one rank.

    Args:
        rank: Int. Global rank, used as the `[rank] ` output prefix.
        argv: List of strings. Program and arguments (may be an ssh call).
        env: Dict of strings. Complete environment of the process.
        host: String or `None`. The remote host `argv` reaches over ssh
            (through `remote_guard`, which reads signal numbers from the
            process's stdin); `None` for a local worker.
    """

    rank: int
    argv: list[str]
    env: dict[str, str]
    host: str | None = None
