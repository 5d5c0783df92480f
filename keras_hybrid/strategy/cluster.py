"""Finds this process's place in the job and starts its gRPC server.

The server starts through `_compat.tf.enable_collectives` (what
`MultiWorkerMirroredStrategy` does to start a worker).
With the Horovod engine no server starts: Horovod's own runtime connects
the workers (tested on TF 2.15.1 with Horovod 0.28.1).
"""

import dataclasses
import os

import tensorflow as tf
from absl import logging

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.contract.elastic_board import LEADER_ENV

_JOB = "worker"


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """Where this process sits in the job.

    Attributes:
        rank: Int. Index of this worker.
        size: Int. Number of workers.
        cluster_spec: `tf.train.ClusterSpec` or `None` for one process.
        rpc_layer: String. Protocol of the cluster channel.
        local_rank: Int. Index of this worker on its host (set by the
            Horovod engine; the TF engine's launcher picks devices itself).
        leader: Int. The task that resolves TensorFlow's collective
            groups: task 0, or the one an elastic launcher names
            (`LEADER_ENV`) after the first task was lost.
    """

    rank: int
    size: int
    cluster_spec: tf.train.ClusterSpec | None
    rpc_layer: str = "grpc"
    local_rank: int = 0
    leader: int = 0

    @property
    def device(self) -> str:
        if self.cluster_spec is None:
            return "/job:localhost/replica:0/task:0/device:CPU:0"
        return f"/job:{_JOB}/replica:0/task:{self.rank}/device:CPU:0"


def resolve(cluster_resolver=None) -> ClusterInfo:
    """Reads the cluster from `cluster_resolver` or the environment.

    Without a resolver, `TF_CONFIG` (what `keras-hybrid-run` and Kubernetes
    operators set) is read with `TFConfigClusterResolver`. A cluster with no
    workers, or no `TF_CONFIG`, means one process.
    """
    if cluster_resolver is None:
        if not os.environ.get("TF_CONFIG"):
            return ClusterInfo(rank=0, size=1, cluster_spec=None)
        cluster_resolver = (
            tf.distribute.cluster_resolver.TFConfigClusterResolver()
        )
    if not isinstance(
        cluster_resolver, tf.distribute.cluster_resolver.ClusterResolver
    ):
        raise TypeError(
            "`cluster_resolver` must be a "
            "`tf.distribute.cluster_resolver.ClusterResolver`. Received: "
            f"cluster_resolver={cluster_resolver!r} of type "
            f"{type(cluster_resolver).__name__}"
        )
    spec = cluster_resolver.cluster_spec()
    jobs = spec.as_dict()
    if not jobs:
        return ClusterInfo(rank=0, size=1, cluster_spec=None)
    if set(jobs) != {_JOB}:
        raise ValueError(
            "HybridStrategy runs one job of identical workers, named "
            f"'{_JOB}'. Received a cluster with jobs {sorted(jobs)}. Put "
            "every process in the 'worker' job (the chief is rank 0)."
        )
    size = spec.num_tasks(_JOB)
    rank = cluster_resolver.task_id
    if rank is None or not 0 <= int(rank) < size:
        raise ValueError(
            f"The task index must be in [0, {size}). Received: "
            f"task_id={rank}. Check TF_CONFIG's 'task' entry."
        )
    return ClusterInfo(
        rank=int(rank),
        size=size,
        cluster_spec=spec,
        rpc_layer=cluster_resolver.rpc_layer or "grpc",
        leader=_leader(size),
    )


def _leader(size: int) -> int:
    """The collective leader an elastic launcher names, else task 0.

    Raises:
        ValueError: If the named task is not in the cluster.
    """
    text = os.environ.get(LEADER_ENV, "").strip()
    if not text:
        return 0
    if not text.isdigit() or not 0 <= int(text) < size:
        raise ValueError(
            f"{LEADER_ENV} must name a task of the cluster, in [0, {size})."
            f" Received: {LEADER_ENV}={text!r}. It is set by "
            "keras-hybrid-run; unset it to let task 0 lead."
        )
    return int(text)


def resolve_horovod(cluster_resolver) -> ClusterInfo:
    """Joins the Horovod job `horovodrun` started: rank, size and local rank
    come from `hvd.init()`. This worker sees only GPU `local_rank`.

    Raises:
        ValueError: If `cluster_resolver` is given (`horovodrun` sets the
            cluster), or `TF_CONFIG` names several workers while Horovod
            sees one process (started by `keras-hybrid-run`, not
            `horovodrun`).
        ImportError: If Horovod with its TensorFlow ops is missing.
    """
    if cluster_resolver is not None:
        raise ValueError(
            "With engine='horovod' the cluster comes from `horovodrun`. "
            f"Received: cluster_resolver={cluster_resolver!r}. Drop it, or "
            "use engine='tf'."
        )
    from keras_hybrid.comm import horovod_communicator

    gpus = tf.config.list_physical_devices("GPU")
    rank, size, local_rank = horovod_communicator.init_horovod()
    tf_config_workers = _tf_config_workers()
    if size == 1 and tf_config_workers > 1:
        raise ValueError(
            "engine='horovod' found one Horovod process, but TF_CONFIG "
            f"names {tf_config_workers} workers. Start Horovod jobs with "
            "`horovodrun -np N python train.py`; `keras-hybrid-run` starts "
            "workers for engine='tf'."
        )
    if gpus:
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")
    logging.info("keras-hybrid Horovod worker %d/%d", rank, size)
    return ClusterInfo(
        rank=rank, size=size, cluster_spec=None, local_rank=local_rank
    )


def _tf_config_workers() -> int:
    if not os.environ.get("TF_CONFIG"):
        return 0
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return len(resolver.cluster_spec().as_dict().get(_JOB, []))


# The cluster this process joined. TensorFlow serves one cluster per process
# for its lifetime; enabling collective ops again tears down the running
# server under the feet of its peers.
_joined: ClusterInfo | None = None


def start_server(info: ClusterInfo) -> None:
    """Starts this worker's server so that collectives reach its peers.

    A second strategy in the same process reuses the running server if it
    names the same cluster, and raises `ValueError` otherwise.
    """
    global _joined
    if info.cluster_spec is None:
        return
    if _joined is not None:
        if _joined == info:
            return
        raise ValueError(
            "This process already joined a cluster as worker "
            f"{_joined.rank} of {_joined.size} "
            f"({_joined.cluster_spec.as_dict()}); TensorFlow serves one "
            "cluster per process. Received another: worker "
            f"{info.rank} of {info.size} ({info.cluster_spec.as_dict()}). "
            "Create every HybridStrategy of a process from the same "
            "cluster, or start a new process."
        )
    if tf_compat.eager_context_started():
        raise RuntimeError(
            "A multi-worker HybridStrategy must be created before this "
            "process runs any TensorFlow op: TensorFlow enables collectives "
            "only in an eager context that has not started, and this "
            f"worker (rank {info.rank} of {info.size}) has already made a "
            "tensor, variable, dataset or lookup table (for example "
            "`tf.data`, `layer.adapt` or `tf.constant`). Create "
            "`keras_hybrid.HybridStrategy()` first, at the top of `main`, "
            "then load the data and build the model."
        )
    tf_compat.enable_collectives(
        info.cluster_spec, _JOB, info.rank, info.rpc_layer, info.leader
    )
    _joined = info
    logging.info(
        "keras-hybrid worker %d/%d serving on %s",
        info.rank,
        info.size,
        info.cluster_spec.task_address(_JOB, info.rank),
    )


_watchdog = None


def start_watchdog(info: ClusterInfo, timeout_seconds: float):
    """Starts this process's `PeerWatchdog` once (a second strategy of the
    same cluster shares it)."""
    global _watchdog
    from keras_hybrid.comm.peer_watchdog import PeerWatchdog

    if _watchdog is None:
        _watchdog = PeerWatchdog(
            _JOB, info.rank, info.size, timeout_seconds
        ).start()
    return _watchdog


def watchdog():
    """This process's `PeerWatchdog`, or None (one process, or Horovod)."""
    return _watchdog


def stop_watchdog() -> None:
    """Stops this process's `PeerWatchdog`, if any; the next
    `start_watchdog` starts a new one. Does not wait for the thread, which
    ends after its current probe."""
    global _watchdog
    if _watchdog is not None:
        _watchdog.stop()
        _watchdog = None
