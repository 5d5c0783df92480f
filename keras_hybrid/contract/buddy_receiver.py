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

Each request names the commits its sender keeps; the receiver drops that
member's other copies.

Imports nothing heavy: the contract runs without TensorFlow.
"""

import threading

from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.blob_stream import BlobReader
from keras_hybrid.contract.blob_stream import BlobWriter
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
        self._copies: dict[tuple, bytearray] = {}  # (task, folder): blob
        self._spares: dict[int, list] = {}  # task: buffers no longer kept

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

    def read(self, folder: str, task: int) -> bytearray | None:
        """`task`'s blob of `folder` (not a copy: read it before the
        next commits of `task` arrive), or None if it is not here."""
        with self._lock:
            return self._copies.get((int(task), folder))

    def folders(self, task: int) -> list[str]:
        """The folders of the copies of `task`'s rows kept here."""
        with self._lock:
            return sorted(f for t, f in self._copies if t == int(task))

    def _answer(self, conn, op: str, args: list) -> None:
        if op != "copy":
            conn.send((False, f"Unknown request {op!r}."))
            return
        task, folder, size, keep = int(args[0]), args[1], int(args[2]), args[3]
        buffer = self._buffer(task, size)
        try:
            got = BlobReader(conn).read_into(buffer)
        except ValueError as error:
            conn.send((False, str(error)))
            return
        if got != size:
            conn.send((False, f"A blob of {got} bytes, not {size}, arrived."))
            return
        with self._lock:
            self._copies[(task, folder)] = buffer
            kept = {*keep, folder}
            for key in [k for k in self._copies if k[0] == task]:
                if key[1] not in kept:
                    spare = self._copies.pop(key)
                    self._spares.setdefault(task, []).append(spare)
        conn.send((True, None))

    def _buffer(self, task: int, size: int) -> bytearray:
        with self._lock:
            spares = self._spares.get(task, [])
            for i, spare in enumerate(spares):
                if len(spare) == size:
                    return spares.pop(i)
            spares.clear()  # of another size: a new layout
        return bytearray(size)


def send_copy(client, task: int, folder: str, arrays, keep) -> int:
    """Sends `task`'s rows of the commit `folder` (`arrays`, the blob's
    arrays in order) to the `BuddyReceiver` that `client` reaches, and
    waits until it holds all of them; returns the blob's length.

    Args:
        client: `tcp_service.TcpClient` of the receiver.
        task: Int. The sender's task.
        folder: String. The commit's folder name
            (`commit_files.folder_name`).
        arrays: NumPy arrays, sent from their memory.
        keep: List of strings. The sender's other kept commits' folders.

    Raises:
        OSError, EOFError: If the receiver cannot be reached, or fails.
    """
    size = commit_blob.blob_layout(arrays)[1]

    def upload(conn):
        stream = BlobWriter(conn)
        try:
            commit_blob.write_blob(stream, arrays)
        except BaseException:
            # The receiver drops a blob cut short with its connection.
            conn.close()
            raise
        stream.finish()
        return conn.recv()

    ok, message = client.request(
        "copy", int(task), folder, size, list(keep), exchange=upload
    )
    if not ok:
        raise OSError(f"The buddy at {client.address} failed: {message}")
    return size
