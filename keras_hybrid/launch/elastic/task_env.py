"""The variables the elastic launcher gives each task: `TF_CONFIG` on
the cluster of every task's host, and the elastic contract
(`elastic_board`)."""

import dataclasses
from collections.abc import Callable

from keras_hybrid.contract import elastic_board
from keras_hybrid.contract.worker_env import worker_env
from keras_hybrid.contract.worker_spec import WorkerSpec
from keras_hybrid.launch.elastic import host_slots
from keras_hybrid.launch.topology import LOOPBACK


@dataclasses.dataclass(frozen=True)
class ElasticSettings:
    """What every task of one elastic job shares.

    Args:
        directory: String. The plan files' directory (`DIR_ENV`).
        min_np: Int. Fewest workers.
        max_np: Int. Most workers (tasks in the cluster).
        commit_interval: Int. Global steps between two commits.
        commit_env: Dict. The variables naming the commit store to this
            host's tasks (`job_setup.JobSetup.commit_env`); empty for
            buddy copies.
        threads: Optional int. Threads per worker.
        extra_env: Optional dict. `--env` variables.
        local_address: String. The address of this host's tasks
            (`host_slots.task_addresses`): loopback on one host, else how
            other hosts reach it. Defaults to loopback.
        channel_env: Dict. The variables naming the launcher's plan
            server (`plan_channel.ChannelServer.env`); empty for files.
        remote_commit_env: Optional dict. The variables naming the commit
            store to other hosts' tasks. Defaults to `commit_env`.
        resolve: Callable. A host's name in the cluster
            (`host_slots.task_addresses`). Defaults to the host itself.
        discovery_wait_seconds: Float. `--elastic-timeout`: how long the
            launcher waits for discovery when fewer than `min_np` are left
            (`DISCOVERY_WAIT_ENV`).
        leader: Int. The task that leads the cluster's collectives
            (`LEADER_ENV`): task 0 until a recovery lost it. Defaults to
            `0`.
        buddy_copies: Int. How many next workers keep a buddy copy of
            each worker's rows (`BUDDY_COPIES_ENV`; the buddy store).
            Defaults to `1`.
    """

    directory: str
    min_np: int
    max_np: int
    commit_interval: int
    commit_env: dict
    threads: int | None
    extra_env: dict | None
    local_address: str = LOOPBACK
    channel_env: dict = dataclasses.field(default_factory=dict)
    remote_commit_env: dict | None = None
    resolve: Callable[[str], str] = str
    discovery_wait_seconds: float = 0.0
    leader: int = 0
    buddy_copies: int = 1


def task_envs(
    placed: dict[int, str], settings: ElasticSettings, ports: list[int]
) -> tuple:
    """Every task's variables, each task on its host in `placed` (others
    on a loopback placeholder) and its port of `ports` (free on that host:
    `host_ports.task_ports`), and the cluster's addresses:
    `(envs, cluster)`."""
    cluster = host_slots.task_addresses(
        placed, ports, settings.local_address, settings.resolve
    )
    contract = {
        elastic_board.DIR_ENV: settings.directory,
        elastic_board.MIN_NP_ENV: str(settings.min_np),
        elastic_board.MAX_NP_ENV: str(settings.max_np),
        elastic_board.COMMIT_INTERVAL_ENV: str(int(settings.commit_interval)),
        elastic_board.DISCOVERY_WAIT_ENV: str(
            float(settings.discovery_wait_seconds)
        ),
        elastic_board.LEADER_ENV: str(int(settings.leader)),
        elastic_board.BUDDY_COPIES_ENV: str(int(settings.buddy_copies)),
        elastic_board.COMMIT_DIR_ENV: "",
        elastic_board.COMMIT_SERVER_ENV: "",
        **settings.channel_env,
    }
    remote = settings.remote_commit_env
    size = settings.max_np
    envs = [
        {
            **worker_env(
                WorkerSpec(task, size, task, size, "", port),
                cluster,
                threads=settings.threads,
                extra_env=settings.extra_env,
            ),
            **contract,
            **(
                settings.commit_env
                if remote is None
                or placed.get(task, host_slots.LOCAL) == host_slots.LOCAL
                else remote
            ),
        }
        for task, port in enumerate(ports)
    ]
    return envs, cluster
