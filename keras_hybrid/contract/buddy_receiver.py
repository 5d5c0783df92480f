"""`BuddyReceiver`: the buddy copies that other workers send this one,
kept in its memory (the buddy store of partitioned tables).

With `--commit-store buddy` each member sends its rows of every table
and slot of a commit (one blob, `commit_blob`) to each of the next
`--buddy-copies` members, from a background thread, over TCP
(`send_copy`; `tcp_service`: `multiprocessing.connection` with the
receiver's own random key, the blob as raw chunks on the socket,
`blob_stream`). The receiver reads each blob straight from the socket
into a buffer of its size (a buffer of a copy from the same member that
is no longer kept, when there is one, so its pages are not faulted in
again), keeps it under (member, commit folder) only once all of it
arrived, then answers. A copy cut short (its sender died) is dropped: a
copy that `read` returns is whole, and a sender that got the answer
knows its buddy holds the copy.

A sender on the same host (as the cluster names both) sends no bytes:
it wrote its commit into a `shared_memory.SharedBuffer` of its own, and
the receiver maps that buffer (`map_peer`) instead of copying it. The
pages then outlive whichever of the two dies first, which is all a buddy
copy is for, at no copy beyond the sender's own snapshot (over loopback
TCP each copy went through the kernel twice, on the cores that train). A
receiver that cannot map it (another PID namespace behind one name) asks
for the blob on the socket instead.

Each request names the commits its sender keeps; the receiver drops that
member's other copies, and answers with the ids of that member's buffers
it still maps: the sender writes a later commit only into a buffer no
buddy maps.

Imports nothing heavy: the contract runs without TensorFlow.
"""

import threading

from keras_hybrid.contract.blob_stream import BlobReader
from keras_hybrid.contract.blob_stream import BlobWriter
from keras_hybrid.contract.blob_stream import write_all
from keras_hybrid.contract.shared_memory import SharedBuffer
from keras_hybrid.contract.shared_memory import map_peer
from keras_hybrid.contract.tcp_service import TcpService


class BuddyReceiver:
    """Receives and keeps buddy copies, in a thread per sender.

    Args:
        host: String. The host name or address the other workers reach
            this process on (for `address` and messages).
        bind: String. The address to listen on. Defaults to all.
    """

    def __init__(self, host: str = "localhost", bind: str = "0.0.0.0") -> None:
        self._service = TcpService(
            host, self._answer, "keras_hybrid_buddy_copies", bind
        )
        self.address = self._service.address
        self.port = int(self.address.rpartition(":")[2])
        self.authkey = self._service.authkey
        self._lock = threading.Lock()
        # (task, folder): the blob, in a buffer of this process (read from
        # the socket) or a mapping of the sender's buffer (`_Mapped`).
        self._copies: dict[tuple, object] = {}
        self._spares: dict[int, list] = {}  # task: own buffers not kept
        # How the copies arrived: mapped from a sender of this host, or
        # read from the socket.
        self.arrivals = {"mapped": 0, "streamed": 0}

    def __repr__(self) -> str:
        return f"the buddy copies received at {self.address}"

    def close(self) -> None:
        self._service.close()

    def path(self, folder: str, task: int) -> str:
        """Names `task`'s copy of `folder` (for messages)."""
        return f"{self.address}: task {int(task)}'s copy of {folder}"

    def exists(self, folder: str, task: int) -> bool:
        """Whether the whole copy of `task`'s rows of `folder` is here."""
        with self._lock:
            return (int(task), folder) in self._copies

    def read(self, folder: str, task: int):
        """`task`'s blob of `folder`, bytes-like (not a copy: read it
        before the next commits of `task` arrive), or None if it is not
        here."""
        with self._lock:
            buffer = self._copies.get((int(task), folder))
        return None if buffer is None else buffer.map

    def folders(self, task: int) -> list[str]:
        """The folders of the copies of `task`'s rows kept here."""
        with self._lock:
            return sorted(f for t, f in self._copies if t == int(task))

    def _answer(self, conn, op: str, args: list) -> None:
        if op != "copy":
            conn.send((False, f"Unknown request {op!r}."))
            return
        task, folder, size, keep = int(args[0]), args[1], int(args[2]), args[3]
        shared = args[4] if len(args) > 4 else None
        buffer = None
        if shared is not None:
            name, buffer_id, inode = shared
            mapped = map_peer(name, size, inode)
            buffer = mapped and _Mapped(mapped, buffer_id)
            if buffer is None:
                conn.send("stream")
        if buffer is None:
            buffer = self._buffer(task, size)
            try:
                got = BlobReader(conn).read_into(buffer.map)
            except ValueError as error:
                conn.send((False, str(error)))
                return
            if got != size:
                conn.send(
                    (False, f"A blob of {got} bytes, not {size}, arrived.")
                )
                return
        with self._lock:
            how = "mapped" if isinstance(buffer, _Mapped) else "streamed"
            self.arrivals[how] += 1
            self._copies[(task, folder)] = buffer
            kept = {*keep, folder}
            for key in [k for k in self._copies if k[0] == task]:
                if key[1] not in kept:
                    spare = self._copies.pop(key)
                    if not isinstance(spare, _Mapped):
                        self._spares.setdefault(task, []).append(spare)
            held = [
                b.id
                for k, b in self._copies.items()
                if k[0] == task and isinstance(b, _Mapped)
            ]
        conn.send((True, held))

    def _buffer(self, task: int, size: int) -> SharedBuffer:
        with self._lock:
            spares = self._spares.get(task, [])
            for i, spare in enumerate(spares):
                if len(spare) == size:
                    return spares.pop(i)
            spares.clear()  # of another size: a new layout
        return SharedBuffer(size, shared=False)


class _Mapped:
    """A copy kept as a mapping of the sender's buffer `id`."""

    def __init__(self, mapped, buffer_id: int) -> None:
        self.map, self.id = mapped, int(buffer_id)


def send_copy(client, task: int, folder: str, blob, keep, shared=None):
    """Gives `task`'s rows of the commit `folder` to the `BuddyReceiver`
    that `client` reaches, and waits until it holds all of them.

    Args:
        client: `tcp_service.TcpClient` of the receiver.
        task: Int. The sender's task.
        folder: String. The commit's folder name
            (`commit_files.folder_name`).
        blob: Bytes-like. The blob of the rows (`commit_blob`), sent from
            its memory if it is not mapped.
        keep: List of strings. The sender's other kept commits' folders.
        shared: `SharedBuffer` holding `blob`, if the receiver is on this
            host (as the cluster names it): the receiver maps it (the
            sender must not write it again while the receiver holds it).

    Returns:
        The ids of the sender's buffers the receiver maps now.

    Raises:
        OSError, EOFError: If the receiver cannot be reached, or fails.
    """
    size = memoryview(blob).nbytes
    offer = (
        ()
        if shared is None or not shared.name
        else ((shared.name, shared.id, shared.inode),)
    )

    def upload(conn):
        # A mapped buffer's answer comes at once (one message: a second
        # small one would wait for the first's delayed ACK); else the
        # receiver asks for the blob.
        if offer and (answer := conn.recv()) != "stream":
            return answer
        stream = BlobWriter(conn)
        try:
            write_all(stream, blob)
        except BaseException:
            # The receiver drops a blob cut short with its connection.
            conn.close()
            raise
        stream.finish()
        return conn.recv()

    ok, answer = client.request(
        "copy", int(task), folder, size, list(keep), *offer, exchange=upload
    )
    if not ok:
        raise OSError(f"The buddy at {client.address} failed: {answer}")
    return answer
