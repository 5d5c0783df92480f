"""How the elastic launcher and its workers exchange plans.

The messages (`elastic_board`: `plan-<g>.json`, `ready-<task>`,
`applied-<g>.json`, `recover-<g>.json`, `recovered-<g>.json`) are named
texts on a board that both sides read and write:

- `FileChannel`: files in one directory (one host, or `--elastic-dir`
  shared by every host);
- `ChannelServer` / `ChannelClient`: the launcher keeps the board in
  memory and serves it over TCP (`tcp_service`: `multiprocessing.
  connection`, with an authentication key in the workers' environment),
  so hosts need no shared filesystem;
- `TeeChannel`: the launcher's side of both at once, for a job that
  started on one host (members read files) and grew onto others (workers
  started since read the server).

Imports nothing heavy: the launcher runs without TensorFlow.
"""

import contextlib
import os
import threading

from keras_hybrid.contract.elastic_board import DIR_ENV
from keras_hybrid.contract.elastic_board import write_file
from keras_hybrid.contract.tcp_service import TcpClient
from keras_hybrid.contract.tcp_service import TcpService

# `host:port` of the launcher's board, and its key (hex); unset: files.
CHANNEL_ENV = "KERAS_HYBRID_ELASTIC_CHANNEL"
AUTHKEY_ENV = "KERAS_HYBRID_ELASTIC_AUTHKEY"


class FileChannel:
    """The board as files in `directory` (written atomically)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def put(self, name: str, text: str) -> None:
        write_file(os.path.join(self.directory, name), text)

    def get(self, name: str) -> str | None:
        try:
            with open(os.path.join(self.directory, name)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        return sorted(os.listdir(self.directory))

    def remove(self, name: str) -> None:
        """Removes `name` if it is there (the launcher's side only)."""
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(self.directory, name))

    def env(self) -> dict[str, str]:
        return {}


class ChannelServer:
    """The launcher's board in memory, served over TCP (`TcpService`).

    Args:
        advertise: String. The host name or address the workers reach
            this process on.
        bind: String. The address to listen on. Defaults to all.
    """

    def __init__(self, advertise: str, bind: str = "0.0.0.0") -> None:
        self._items: dict[str, str] = {}
        self._lock = threading.Lock()
        self._service = TcpService(
            advertise, self._answer, "keras_hybrid_plans", bind
        )
        self.address = self._service.address
        self.authkey = self._service.authkey

    def put(self, name: str, text: str) -> None:
        with self._lock:
            self._items[name] = text

    def get(self, name: str) -> str | None:
        with self._lock:
            return self._items.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._items)

    def remove(self, name: str) -> None:
        """Removes `name` if it is there (the launcher's side only)."""
        with self._lock:
            self._items.pop(name, None)

    def env(self) -> dict[str, str]:
        """The workers' variables that name this board."""
        return {CHANNEL_ENV: self.address, AUTHKEY_ENV: self.authkey.hex()}

    def close(self) -> None:
        self._service.close()

    def _answer(self, conn, op: str, args: list) -> None:
        answer = {"put": self.put, "get": self.get, "names": self.names}
        conn.send(answer[op](*args))


class TeeChannel:
    """The launcher's board as files (read by the workers started while
    the job ran on one host) and a `ChannelServer` (read by those started
    since): written to both, read from either.

    Args:
        files: `FileChannel`.
        server: `ChannelServer`.
    """

    def __init__(self, files: FileChannel, server: ChannelServer) -> None:
        self.files, self.server = files, server
        self.address = server.address

    def put(self, name: str, text: str) -> None:
        self.files.put(name, text)
        self.server.put(name, text)

    def get(self, name: str) -> str | None:
        text = self.files.get(name)
        return self.server.get(name) if text is None else text

    def names(self) -> list[str]:
        return sorted(set(self.files.names()) | set(self.server.names()))

    def remove(self, name: str) -> None:
        self.files.remove(name)
        self.server.remove(name)

    def env(self) -> dict[str, str]:
        """Workers started from now on read the server."""
        return self.server.env()

    def close(self) -> None:
        self.server.close()


class ChannelClient:
    """A worker's end of `ChannelServer` (one connection, thread-safe;
    reconnects once after a broken connection).

    Args:
        address: String. The server's `host:port`.
        authkey: Bytes. The server's key.
    """

    def __init__(self, address: str, authkey: bytes) -> None:
        self._client = TcpClient(address, authkey)

    def put(self, name: str, text: str) -> None:
        self._client.request("put", name, text)

    def get(self, name: str) -> str | None:
        return self._client.request("get", name)

    def names(self) -> list[str]:
        return self._client.request("names")


def channel_from_env(directory: str | None = None):
    """The board the launcher named in this worker's environment: its
    TCP server, else files in `directory` (default `$DIR_ENV`)."""
    address = os.environ.get(CHANNEL_ENV)
    if address:
        return ChannelClient(address, bytes.fromhex(os.environ[AUTHKEY_ENV]))
    return FileChannel(directory or os.environ[DIR_ENV])
