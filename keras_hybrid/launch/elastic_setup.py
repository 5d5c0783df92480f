"""What an elastic job's first discovery decides: one host or several,
how plans travel, where tables are committed, and the address of this
host's tasks."""

import dataclasses
import logging
import socket

from keras_hybrid.launch import host_slots
from keras_hybrid.launch.commit_server import CommitServer
from keras_hybrid.launch.commit_store import choose_store
from keras_hybrid.launch.commit_store import make_commit_dir
from keras_hybrid.launch.elastic_files import COMMIT_DIR_ENV
from keras_hybrid.launch.plan_channel import ChannelServer
from keras_hybrid.launch.plan_channel import FileChannel
from keras_hybrid.launch.ssh import reach_address
from keras_hybrid.launch.topology import LOOPBACK

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class JobSetup:
    """Args:
    multi_host: Boolean. Whether tasks may run on other hosts.
    channel: The plan board (`plan_channel`).
    commit_store: String. The store of partitioned tables
        (`commit_store.STORES`).
    commit_dir: Optional string. The job's commit folder (the directory
        and served stores; removed at the end); None for buddy copies.
    commit_server: Optional `CommitServer` serving `commit_dir` (the
        served store; closed at the end).
    local_address: String. The address of this host's tasks.
    """

    multi_host: bool
    channel: object
    commit_store: str
    commit_dir: str | None
    commit_server: CommitServer | None
    local_address: str

    def commit_env(self) -> dict[str, str]:
        """The workers' variables that name the commit store (none for
        buddy copies)."""
        if self.commit_server is not None:
            return self.commit_server.env()
        if self.commit_dir:
            return {COMMIT_DIR_ENV: self.commit_dir}
        return {}


def setup_job(
    discovered: list,
    directory: str,
    elastic_dir: str | None,
    commit_store: str | None,
    commit_dir: str | None,
) -> JobSetup:
    """A job whose first discovery names other hosts (or that has a shared
    `elastic_dir`) is multi-host. Without `elastic_dir` its plans travel
    over TCP from this process (`ChannelServer`, on the address the first
    other host reaches it on), else as files in `directory`; without a
    shared `commit_dir` its tables are committed to this process's
    `CommitServer` (by default; `commit_store.choose_store`).

    Raises:
        ValueError: From `commit_store`, for inconsistent flags.
    """
    remote = host_slots.remote_hosts(discovered)
    multi_host = elastic_dir is not None or bool(remote)
    store = choose_store(commit_store, commit_dir, not multi_host)
    local = LOOPBACK
    if remote:
        local = reach_address(remote[0])
    elif multi_host:
        local = socket.getfqdn()
    channel = FileChannel(directory)
    if remote and elastic_dir is None:
        channel = ChannelServer(local)
        logger.info("plans are served at %s", channel.address)
    folder = make_commit_dir(store, commit_dir, directory)
    server = CommitServer(folder, local) if store == "served" else None
    where = "with a buddy copy on the next worker"
    if folder:
        where = f"to files under {folder}"
    if server is not None:
        where += f" served at {server.address}"
    logger.info("partitioned tables are committed %s", where)
    return JobSetup(multi_host, channel, store, folder, server, local)
