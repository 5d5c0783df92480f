"""`--slurm`: turn this Slurm task into one worker.

TensorFlow is imported lazily here, and only here, for
`tf.distribute.cluster_resolver.SlurmClusterResolver`.
"""

import logging
import os

from keras_hybrid.contract.worker_env import worker_env
from keras_hybrid.contract.worker_spec import WorkerSpec
from keras_hybrid.launch import devices

logger = logging.getLogger(__name__)


def resolve_slurm_spec(port: int) -> tuple[WorkerSpec, list[str]]:
    """Reads the Slurm step from the environment with SlurmClusterResolver.

    Args:
        port: Int. Port of local rank 0 on every node.

    Returns:
        Tuple of this task's `WorkerSpec` and the `host:port` list of all
        workers in rank order.

    Raises:
        ValueError: If this is not a Slurm step, or the resolver places this
            task on another node than the one it runs on.
    """
    import tensorflow as tf

    num_tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    if not num_tasks.isdigit():
        raise ValueError(_not_in_slurm(f"SLURM_STEP_NUM_TASKS={num_tasks!r}"))
    try:
        # GPUs are assigned by `visible_device` below; these two values only
        # keep the resolver from calling nvidia-smi or dividing by zero.
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            port_base=port,
            gpus_per_node=int(num_tasks),
            gpus_per_task=1,
            auto_set_gpu=False,
        )
        cluster = resolver.cluster_spec().as_dict()["worker"]
    except (RuntimeError, ValueError) as error:
        raise ValueError(_not_in_slurm(str(error))) from error
    rank = resolver.task_id
    host = cluster[rank].rpartition(":")[0]
    _check_node(rank, host)
    same_host = [
        r for r, addr in enumerate(cluster) if addr.rpartition(":")[0] == host
    ]
    spec = WorkerSpec(
        rank=rank,
        size=len(cluster),
        local_rank=same_host.index(rank),
        local_size=len(same_host),
        host=host,
        port=int(cluster[rank].rpartition(":")[2]),
    )
    return spec, cluster


def _check_node(rank: int, host: str) -> None:
    node = os.environ.get("SLURMD_NODENAME")
    if node and node != host:
        raise ValueError(
            f"SlurmClusterResolver placed rank {rank} on {host!r}, but this "
            f"task runs on {node!r}. Received: SLURMD_NODENAME={node!r}. The "
            "resolver assigns ranks node by node in sorted name order; run "
            "`srun --distribution=block` on nodes whose names sort in the "
            "order Slurm lists them (e.g. n09,n10 rather than n9,n10)."
        )


def _not_in_slurm(detail: str) -> str:
    return (
        "`--slurm` must run inside a Slurm job step, one launcher per task "
        f"(`srun -n 4 keras-hybrid-run --slurm ...`). Received: {detail}."
    )


def slurm_worker_env(
    *,
    port: int,
    threads: int | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, str]:
    """Returns the complete environment for this Slurm task's worker.

    Args:
        port: Int. Port of local rank 0 on every node.
        threads: Int or `None`. Threads per worker. Defaults to
            `max(1, os.cpu_count() // local_size)`.
        extra_env: Dict or `None`. `--env` variables.

    Returns:
        Dict. `os.environ` plus the per-worker contract variables.

    Raises:
        ValueError: As `resolve_slurm_spec`.
    """
    spec, cluster = resolve_slurm_spec(port)
    parent_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpu_count = devices.detect_gpu_count() if parent_devices is None else 0
    device = devices.visible_device(spec.local_rank, parent_devices, gpu_count)
    contract = worker_env(
        spec, cluster, threads=threads, device=device, extra_env=extra_env
    )
    return {**os.environ, **contract}


def exec_slurm(command: list[str], env: dict[str, str]) -> None:
    """Replaces this process with `command`; returns only on failure.

    Args:
        command: List of strings. Program and arguments.
        env: Dict. Complete environment, as from `slurm_worker_env`.

    Raises:
        OSError: If the command cannot be executed.
    """
    logger.debug("exec %s as rank %s", command, env["KERAS_HYBRID_RANK"])
    os.execvpe(command[0], command, env)
