"""`BuddySender`: the buddy store's commit on one member.

At each commit the training thread copies this member's rows of every
partitioned table and slot (one copy of each shard from the variable's
own memory) into one blob (`commit_blob`) in a buffer of shared memory
(`contract.shared_memory.SharedBuffer`), which is this member's own copy
of the commit; then a background thread gives it to each of the next
`copies` members in ring order (`contract.buddy_receiver.send_copy`),
while the next steps run. A buddy on this host (as the cluster names
both) maps the buffer: no byte is copied again, and the pages outlive
either process. A buddy on another host gets the blob over TCP.

A buffer is written again only when this member no longer keeps its
commit and no buddy maps it any more (each answer names the buffers the
buddy still maps), so a copy a buddy holds never changes under it. No
collective runs at a commit, but once per generation of the members:
one small all-reduce in which every member gives the port and key of
its `BuddyReceiver` (its host is the one the current cluster names).

The next commit waits for the sends of the previous one: a sender that
passed it knows its buddies hold whole copies of the commit before. A
send that failed because its buddy was lost meanwhile is the recovery's
business (the commit before it is restorable: `buddy_store.restorable`),
and so is one from before the members last changed (a recovery or a
resize; its commit is superseded by the one that follows every change,
and a joiner may have the lost buddy's task id by now). One that failed
towards a member of the same generation raises `BuddyCopyError`, which
waits for the launcher's plan like a lost peer's collective error: if the
buddy died, the plan says so and training recovers; else it stops.

No private hook is touched here.
"""

import threading
from multiprocessing import AuthenticationError

import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.buddy_receiver import BuddyReceiver
from keras_hybrid.contract.buddy_receiver import send_copy
from keras_hybrid.contract.commit_files import folder_name
from keras_hybrid.contract.shared_memory import SharedBuffer
from keras_hybrid.contract.tcp_service import TcpClient
from keras_hybrid.elastic.file_store import TableCopy

PATH = "commit"  # the `CommStats` path of the bytes of buddy copies
_WORDS = 3  # per member in the exchange: port and two words of its key


class BuddyCopyError(ConnectionError):
    """A buddy copy did not reach a member of the current generation."""


class BuddySender:
    """Sends this member's rows of each commit to its buddies.

    Args:
        membership: The job's `ElasticMembership` (its `buddy_receiver`
            is started here if it has none yet).
        communicator: The `Communicator` of the members.
    """

    def __init__(self, membership, communicator) -> None:
        self._membership = membership
        self._comm = communicator
        if membership.buddy_receiver is None:
            membership.buddy_receiver = BuddyReceiver(
                membership.host_of(membership.task)
            )
        self.receiver = membership.buddy_receiver
        self._peers: dict[int, TcpClient] = {}
        self._local: set = set()  # buddies on this host, by task
        self._peers_generation: int | None = None
        self._thread: threading.Thread | None = None
        self._failures: list = []  # (task, error) of the last sends
        self._sent_generation: int | None = None  # of the last sends
        self._blobs: list[_Blob] = []  # this member's commit buffers

    def take(self, tables, members, global_step, generation, keep):
        """Snapshots `tables` (with their slots) and starts sending them.

        Args:
            tables: `ShardedTable`s and slots (`resharding.tables_of`).
            members: List of ints. The current member tasks, sorted.
            global_step: Int. The commit's global step.
            generation: Int. The members' generation.
            keep: List of strings. Folders of this member's other kept
                commits; the buffers of any other may be reused.

        Returns:
            `{"members", "tables": [TableCopy], "bytes", "copies",
            "folder", "files"}` (`files`: this member's receiver), or None
            without tables.
        """
        tables = list(tables)
        if not tables:
            return None
        self.wait()
        members = list(members)
        if self._peers_generation != generation:
            self._exchange(members, generation)
        # A member alone has no buddy (and nothing to survive).
        copies = min(self._membership.buddy_copies, len(members) - 1)
        folder = folder_name(global_step, generation)
        arrays = [np.asarray(t.stored_tensor_shared()) for t in tables]
        blob = self._blob(commit_blob.blob_layout(arrays)[1], keep)
        own = self._fill(blob.buffer.map, arrays)
        blob.folder = folder
        rank = members.index(self._membership.task)
        buddies = [
            members[(rank + k) % len(members)] for k in range(1, 1 + copies)
        ]
        sent = copies * sum(a.nbytes for a in own)
        self._comm.stats.record(
            PATH,
            sent,
            calls=0,
            received_bytes=_received(tables, own, rank, copies),
        )
        self._sent_generation = generation
        self._thread = threading.Thread(
            target=self._send,
            args=(buddies, blob, list(keep)),
            name="keras_hybrid_elastic_buddy_sender",
            daemon=True,
        )
        self._thread.start()
        return {
            "members": members,
            "tables": [
                TableCopy(path=t.path, partition=t.partition, own=o, buddy=None)
                for t, o in zip(tables, own, strict=True)
            ],
            "bytes": sent,
            "copies": max(1, copies),
            "folder": folder,
            "files": self.receiver,
        }

    def wait(self) -> None:
        """Waits for the last sends. Sends to tasks that are no longer
        members are cut short (their host may be gone).

        Raises:
            BuddyCopyError: If a send to a member failed, and the members
                did not change since it started.
        """
        members = set(self._membership.members)
        changed = self._sent_generation != getattr(
            self._membership, "generation", self._sent_generation
        )
        if self._thread is not None:
            for task, client in self._peers.items():
                if task not in members:
                    client.abort()
            self._thread.join()
            self._thread = None
        failures, self._failures = self._failures, []
        for task, error in failures:
            if task not in members or changed:
                logging.info(
                    "keras-hybrid elastic: task %d's buddy copy to lost "
                    "task %d did not arrive: %s",
                    self._membership.task,
                    task,
                    error,
                )
                continue
            raise BuddyCopyError(
                f"keras-hybrid elastic: task {self._membership.task} could "
                f"not send its buddy copy of partitioned tables to task "
                f"{task} ({type(error).__name__}: {error}). The workers "
                "must reach each other over TCP on the hosts their cluster "
                "names; else use --commit-store served."
            ) from error

    def _send(self, buddies, blob, keep) -> None:
        for task in buddies:
            try:
                held = send_copy(
                    self._peers[task],
                    self._membership.task,
                    blob.folder,
                    blob.buffer.map,
                    keep,
                    shared=blob.buffer if task in self._local else None,
                )
            except (OSError, EOFError, AuthenticationError) as error:
                self._failures.append((task, error))
                continue
            for other in self._blobs:
                if other.buffer.id in held:
                    other.holders.add(task)
                else:
                    other.holders.discard(task)

    def _exchange(self, members: list, generation: int) -> None:
        """Learns every member's receiver (one all-reduce, a collective of
        the members): the clients of this member's buddies."""
        mine = np.zeros([len(members), _WORDS], np.int64)
        key = np.frombuffer(self.receiver.authkey, np.int64)
        mine[members.index(self._membership.task)] = [self.receiver.port, *key]
        (everyone,) = self._comm.all_reduce(
            [tf.constant(mine.reshape(-1))], op="sum", path="control"
        )
        everyone = np.asarray(everyone).reshape(len(members), _WORDS)
        for client in self._peers.values():
            client.abort()
        self._peers, self._local = {}, set()
        here = self._membership.host_of(self._membership.task)
        for task, (port, *key) in zip(members, everyone.tolist(), strict=True):
            if task == self._membership.task:
                continue
            host = self._membership.host_of(task)
            authkey = np.array(key, np.int64).tobytes()
            self._peers[task] = TcpClient(f"{host}:{port}", authkey)
            if host == here:
                self._local.add(task)
        for blob in self._blobs:  # a lost member maps nothing any more
            blob.holders &= set(members)
        self._peers_generation = generation

    def _fill(self, buffer, arrays) -> list:
        """Writes the blob of `arrays` into `buffer`; their views in it."""
        return commit_blob.fill_blob(buffer, arrays)

    def _blob(self, size: int, keep) -> "_Blob":
        """A buffer of `size` bytes for the next commit: one of a commit
        this member no longer keeps (not in `keep`) that no buddy maps,
        else a new one. Free buffers of another size are dropped."""
        kept, found = set(keep), None
        for blob in list(self._blobs):
            if blob.folder in kept or blob.holders:
                continue
            if found is None and len(blob.buffer) == size:
                found = blob
            else:
                self._blobs.remove(blob)
        if found is None:
            found = _Blob(SharedBuffer.create(size))
            self._blobs.append(found)
        found.folder = None
        return found


class _Blob:
    """One of this member's commit buffers: the commit it holds (`folder`,
    None while free) and the buddies that map it (`holders`)."""

    def __init__(self, buffer: SharedBuffer) -> None:
        self.buffer = buffer
        self.folder: str | None = None
        self.holders: set = set()


def _received(tables, own, rank: int, copies: int) -> int:
    """Bytes of the copies this member receives: the rows of each of the
    `copies` ranks before it (rows as wide as this member's `own`)."""
    total = 0
    for table, array in zip(tables, own, strict=True):
        if table.partition is None:
            continue  # a dynamic table's keys: their size is the sender's
        row = array.itemsize * int(np.prod(array.shape[1:]))
        shards = table.partition.num_shards
        for k in range(1, copies + 1):
            total += table.partition.rows_on_shard((rank - k) % shards) * row
    return total
