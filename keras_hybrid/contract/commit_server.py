"""The served commit store: the launcher keeps the commit files of
partitioned tables on its own host and serves them over TCP.

`CommitServer` holds a `CommitFiles` directory (made by
`commit_store.make_commit_dir`, under /dev/shm when there is one) behind
a `tcp_service.TcpService` of its own: each worker streams its rows of a
commit (one blob, `contract.commit_blob`) from a background thread, as raw
bytes on the socket (`blob_stream`) that the server writes straight to
the file, so hosts need no shared filesystem and no collective runs at
commit time; after a lost worker the survivor that takes its rows fetches
its blob.
`CommitClient` is the worker's end, with the methods of `CommitFiles`.

Imports nothing heavy: the launcher runs without TensorFlow.
"""

import os
from collections.abc import Callable
from multiprocessing import AuthenticationError

from keras_hybrid.contract.blob_stream import BlobReader
from keras_hybrid.contract.blob_stream import BlobWriter
from keras_hybrid.contract.blob_stream import send_blob
from keras_hybrid.contract.commit_files import CommitFiles
from keras_hybrid.contract.commit_files import file_name
from keras_hybrid.contract.elastic_board import COMMIT_AUTHKEY_ENV
from keras_hybrid.contract.elastic_board import COMMIT_DIR_ENV
from keras_hybrid.contract.elastic_board import COMMIT_SERVER_ENV
from keras_hybrid.contract.tcp_service import TcpClient
from keras_hybrid.contract.tcp_service import TcpService


class CommitServer:
    """Serves the commit files under `root`.

    Args:
        root: String. A directory on this host for the job's commits.
        advertise: String. The host name or address the workers reach
            this process on.
        bind: String. The address to listen on. Defaults to all.
    """

    def __init__(
        self, root: str, advertise: str, bind: str = "0.0.0.0"
    ) -> None:
        self.files = CommitFiles(root)
        self._service = TcpService(
            advertise, self._answer, "keras_hybrid_commits", bind
        )
        self.address = self._service.address

    def advertise(self, host: str) -> None:
        """Workers started from now on reach this server on `host`
        (`TcpService.advertise`)."""
        self._service.advertise(host)
        self.address = self._service.address

    def env(self) -> dict[str, str]:
        """The workers' variables that name this server."""
        return {
            COMMIT_SERVER_ENV: self.address,
            COMMIT_AUTHKEY_ENV: self._service.authkey.hex(),
        }

    def close(self) -> None:
        self._service.close()

    def _answer(self, conn, op: str, args: list) -> None:
        # A failure of the files is the client's error to raise; one of
        # the connection (`EOFError` from the blob) ends this client's
        # thread (`TcpService`), and `CommitFiles.write` drops the file.
        blob = BlobReader(conn) if op == "write" else None
        try:
            if op == "write":
                value = self.files.write(*args, blob.copy_to)
            elif op == "prune":
                value = self.files.prune(*args)
            elif op in ("read", "exists"):
                value = getattr(self.files, op)(*args)
            else:
                raise ValueError(f"Unknown request {op!r}.")
        except (OSError, ValueError, TypeError) as error:
            if blob is not None:
                blob.drain()
            conn.send((False, f"{type(error).__name__}: {error}"))
            return
        if op == "read":
            conn.send((True, value is not None))
            if value is not None:
                send_blob(conn, value)
        else:
            conn.send((True, value))


class CommitClient:
    """A worker's end of `CommitServer`: the methods of `CommitFiles`.

    Args:
        address: String. The server's `host:port`.
        authkey: Bytes. The server's key.
    """

    def __init__(self, address: str, authkey: bytes) -> None:
        self._client = TcpClient(address, authkey)

    def __repr__(self) -> str:
        return f"the launcher's commit server at {self._client.address}"

    def path(self, folder: str, task: int) -> str:
        return f"{self._client.address}/{folder}/{file_name(task)}"

    def write(self, folder: str, task: int, produce: Callable) -> None:
        def upload(conn):
            stream = BlobWriter(conn)
            try:
                produce(stream)
            except BaseException:
                # The server drops a blob cut short with its connection.
                conn.close()
                raise
            stream.finish()
            return conn.recv()

        self._check(self._request("write", folder, task, exchange=upload))

    def read(self, folder: str, task: int) -> bytes | None:
        def download(conn):
            ok, found = conn.recv()
            if ok and found:
                return True, BlobReader(conn).read_all()
            return ok, None if ok else found

        answer = self._request("read", folder, task, exchange=download)
        return self._check(answer)

    def exists(self, folder: str, task: int) -> bool:
        return self._check(self._request("exists", folder, task))

    def prune(self, task: int, keep: list) -> None:
        self._check(self._request("prune", task, list(keep)))

    def _request(self, *request, exchange=None):
        try:
            return self._client.request(*request, exchange=exchange)
        except (OSError, EOFError, AuthenticationError) as error:
            raise ConnectionError(
                f"keras-hybrid elastic: {self!r} did not answer "
                f"{request[0]!r} ({type(error).__name__}: {error}). The "
                "launcher (keras-hybrid-run) must be running and reachable "
                "from this host."
            ) from error

    def _check(self, answer: tuple):
        ok, value = answer
        if not ok:
            raise OSError(f"{self!r} failed: {value}")
        return value


def commit_files_from_env():
    """Where this worker's commits of partitioned tables go, as the
    launcher named them in its environment: its `CommitServer`
    (`CommitClient`), a shared directory (`CommitFiles`), or None for
    buddy copies."""
    address = os.environ.get(COMMIT_SERVER_ENV)
    if address:
        key = bytes.fromhex(os.environ[COMMIT_AUTHKEY_ENV])
        return CommitClient(address, key)
    root = os.environ.get(COMMIT_DIR_ENV)
    return CommitFiles(root) if root else None
