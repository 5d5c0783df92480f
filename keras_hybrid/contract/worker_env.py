"""The per-worker environment: the contract with the strategy code."""

import json
import os

from keras_hybrid.contract.worker_spec import WorkerSpec

THREAD_VARIABLES = (
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "OMP_NUM_THREADS",
    "KERAS_HYBRID_THREADS",
)


def default_threads(local_size: int) -> int:
    """Splits this machine's cores evenly among its local workers.

    Args:
        local_size: Int. Number of workers on the host.

    Returns:
        Int. `max(1, os.cpu_count() // local_size)`.
    """
    return max(1, (os.cpu_count() or 1) // local_size)


def tf_config(cluster: list[str], rank: int) -> str:
    """Returns the `TF_CONFIG` JSON for worker `rank`.

    Args:
        cluster: List of strings. `host:port` of every worker in rank order.
        rank: Int. Index of this worker.

    Returns:
        String. JSON with a `worker` cluster and this task.
    """
    return json.dumps(
        {
            "cluster": {"worker": list(cluster)},
            "task": {"type": "worker", "index": rank},
        }
    )


def worker_env(
    spec: WorkerSpec,
    cluster: list[str],
    *,
    threads: int | None = None,
    device: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, str]:
    """Returns the variables the launcher sets for one worker.

    Only the contract variables are returned, not the inherited environment.

    Args:
        spec: `WorkerSpec`. Placement of the worker.
        cluster: List of strings. `host:port` of every worker in rank order.
        threads: Int or `None`. Threads per worker. Defaults to
            `default_threads(spec.local_size)`.
        device: String or `None`. `CUDA_VISIBLE_DEVICES`; `None` leaves it
            unset.
        extra_env: Dict or `None`. `--env` variables, applied last so they
            can override anything above.

    Returns:
        Dict of variable name to value.
    """
    if threads is None:
        threads = default_threads(spec.local_size)
    env = {
        "TF_CONFIG": tf_config(cluster, spec.rank),
        "KERAS_HYBRID_RANK": str(spec.rank),
        "KERAS_HYBRID_SIZE": str(spec.size),
        "KERAS_HYBRID_LOCAL_RANK": str(spec.local_rank),
        "KERAS_HYBRID_LOCAL_SIZE": str(spec.local_size),
        "PYTHONUNBUFFERED": "1",
    }
    env.update({name: str(threads) for name in THREAD_VARIABLES})
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    env.update(extra_env or {})
    return env
