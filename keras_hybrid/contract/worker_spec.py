"""Where one worker runs and who its neighbours are."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """Placement of one worker process in the job.

    Args:
        rank: Int. Global rank, `0 .. size - 1`.
        size: Int. Number of workers in the job.
        local_rank: Int. Rank among the workers on the same host.
        local_size: Int. Number of workers on the same host.
        host: String. Host name or address the worker runs on.
        port: Int. Port the worker's TensorFlow server listens on.

    Example:

    ```python
    spec = WorkerSpec(rank=0, size=1, local_rank=0, local_size=1,
                      host="127.0.0.1", port=29400)
    spec.address  # "127.0.0.1:29400"
    ```
    """

    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    port: int

    @property
    def address(self) -> str:
        """String. `host:port` as it appears in `TF_CONFIG`."""
        return f"{self.host}:{self.port}"
