"""What an elastic job's first discovery decides: one host or several,
how plans travel, where tables are committed, and the address of this
host's tasks."""

import dataclasses
import logging
import socket

from keras_hybrid.launch import host_slots
from keras_hybrid.launch.commit_store import make_commit_dir
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
    commit_dir: Optional string. The directory store's folder; None for
        buddy copies.
    local_address: String. The address of this host's tasks.
    """

    multi_host: bool
    channel: object
    commit_dir: str | None
    local_address: str


def setup_job(
    discovered: list,
    directory: str,
    elastic_dir: str | None,
    commit_store: str,
    commit_dir: str | None,
) -> JobSetup:
    """A job whose first discovery names other hosts (or that has a shared
    `elastic_dir`) is multi-host. Without `elastic_dir` its plans travel
    over TCP from this process (`ChannelServer`, on the address the first
    other host reaches it on), else as files in `directory`; without a
    shared `commit_dir` its tables keep buddy copies.

    Raises:
        ValueError: From `make_commit_dir`, for inconsistent flags.
    """
    remote = host_slots.remote_hosts(discovered)
    multi_host = elastic_dir is not None or bool(remote)
    local = LOOPBACK
    if remote:
        local = reach_address(remote[0])
    elif multi_host:
        local = socket.getfqdn()
    channel = FileChannel(directory)
    if remote and elastic_dir is None:
        channel = ChannelServer(local)
        logger.info("plans are served at %s", channel.address)
    commit_dir = make_commit_dir(
        commit_store, commit_dir, directory, not multi_host
    )
    logger.info(
        "partitioned tables are committed %s",
        f"to files under {commit_dir}"
        if commit_dir
        else "with a buddy copy on the next worker",
    )
    return JobSetup(multi_host, channel, commit_dir, local)
