"""What an elastic job's first discovery decides: one host or several,
how plans travel, where tables are committed, and the address of this
host's tasks; and how a one-host job becomes multi-host when discovery
later names another host (`widen_job`)."""

import dataclasses
import logging
import socket

from keras_hybrid.contract.commit_server import CommitServer
from keras_hybrid.contract.elastic_board import COMMIT_DIR_ENV
from keras_hybrid.contract.plan_channel import ChannelServer
from keras_hybrid.contract.plan_channel import FileChannel
from keras_hybrid.contract.plan_channel import TeeChannel
from keras_hybrid.launch.elastic import host_slots
from keras_hybrid.launch.elastic.commit_store import choose_store
from keras_hybrid.launch.elastic.commit_store import make_commit_dir
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
        served store, or the directory store's folder served to other
        hosts once a one-host job widened; closed at the end).
    local_address: String. The address of this host's tasks.
    shared_dir: Boolean. Whether `commit_dir` is in the user's
        `--commit-dir` (shared by the hosts, the flag says), not in a
        folder the launcher made on its host.
    """

    multi_host: bool
    channel: object
    commit_store: str
    commit_dir: str | None
    commit_server: CommitServer | None
    local_address: str
    shared_dir: bool = False

    def commit_env(self, local: bool = True) -> dict[str, str]:
        """The variables that name the commit store (none for buddy
        copies) to the workers on this host (`local`) or on others. The
        commit server is for other hosts (the served store's, or a
        directory store's folder under /dev/shm served once the job
        widened, `widen_job`): this host's workers write its folder
        directly, since uploading to their own host would only copy the
        rows twice more."""
        if self.commit_server is not None and not local:
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
    address: str | None = None,
) -> JobSetup:
    """A job whose first discovery names other hosts (or that has a shared
    `elastic_dir`) is multi-host. Without `elastic_dir` its plans travel
    over TCP from this process (`ChannelServer`, on `address`, by default
    the address the first other host reaches it on), else as files in
    `directory`; without a shared `commit_dir` its tables are committed
    to this process's `CommitServer` (by default;
    `commit_store.choose_store`).

    Raises:
        ValueError: From `commit_store`, for inconsistent flags.
    """
    remote = host_slots.remote_hosts(discovered)
    multi_host = elastic_dir is not None or bool(remote)
    store = choose_store(commit_store, commit_dir, not multi_host)
    local = LOOPBACK
    if multi_host:
        local = address or _reached_on(remote)
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
    return JobSetup(
        multi_host, channel, store, folder, server, local, bool(commit_dir)
    )


def widen_job(
    setup: JobSetup, remote: list[str], address: str | None = None
) -> JobSetup:
    """The setup of a one-host job once discovery named the `remote` hosts:
    this host's tasks serve on `address` (by default the address the first
    of them reaches it on), plans are written to this process's TCP board
    as well as to the files the members read (`TeeChannel`), and a
    directory store made by the launcher is served to the other hosts'
    workers (`CommitServer` on the same folder; this host's workers keep
    writing it directly). A user's `--commit-dir` stays the shared store
    the flag says it is; buddy copies need nothing.
    """
    local = address or _reached_on(remote)
    channel = setup.channel
    if isinstance(channel, FileChannel):
        channel = TeeChannel(channel, ChannelServer(local))
        logger.info("plans are served at %s too", channel.address)
    server = setup.commit_server
    if server is not None:
        server.advertise(local)
    elif setup.commit_store == "directory" and not setup.shared_dir:
        server = CommitServer(setup.commit_dir, local)
        logger.info(
            "commits under %s are served to other hosts at %s",
            setup.commit_dir,
            server.address,
        )
    elif setup.commit_store == "directory":
        logger.warning(
            "other hosts' workers commit to --commit-dir %s: it must be "
            "shared with them at that path.",
            setup.commit_dir,
        )
    return dataclasses.replace(
        setup,
        multi_host=True,
        channel=channel,
        commit_server=server,
        local_address=local,
    )


def _reached_on(remote: list[str]) -> str:
    """This host's address as `remote[0]` reaches it, or its name."""
    return reach_address(remote[0]) if remote else socket.getfqdn()
