"""The launcher's TCP services to its workers: an authenticated listener
that serves each connection in its own thread, and the worker's end.

`multiprocessing.connection` carries the requests (pickled tuples `(op,
*args)`) and raw byte blobs (`send_bytes`, any size); every peer must
know the service's key, given to workers in their environment. The plan
board (`plan_channel.ChannelServer`) and the commit store
(`commit_server.CommitServer`) each run one, so a slow upload of table
rows never holds up a plan message.

Imports nothing heavy: the launcher runs without TensorFlow.
"""

import contextlib
import os
import secrets
import socket
import threading
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from multiprocessing.connection import Listener


class TcpService:
    """Accepts authenticated connections; each is served by `handle` in a
    thread of its own.

    Args:
        advertise: String. The host name or address the workers reach
            this process on.
        handle: Callable `(conn, op, args)`. Answers one request on
            `conn` (a `multiprocessing.connection.Connection`).
        name: String. The accepting thread's name.
        bind: String. The address to listen on. Defaults to all.
    """

    def __init__(
        self,
        advertise: str,
        handle: Callable,
        name: str,
        bind: str = "0.0.0.0",
    ) -> None:
        self.authkey = secrets.token_bytes(16)
        self._listener = Listener((bind, 0), authkey=self.authkey)
        self.address = f"{advertise}:{self._listener.address[1]}"
        self._handle = handle
        self._closed = False
        self._conns: set = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=name, daemon=True).start()

    def advertise(self, host: str) -> None:
        """Names this service by `host` from now on (`address`): a job
        that started on one host serves other hosts too. It listens on
        `bind`, so clients that use the old name keep reaching it."""
        self.address = f"{host}:{self._listener.address[1]}"

    def close(self) -> None:
        """Stops listening and ends every connection: a client's next
        request fails as if this process were gone."""
        self._closed = True
        self._listener.close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            # Wakes the thread blocked reading it (closing the descriptor
            # would not).
            with contextlib.suppress(OSError):
                with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                    sock.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError, AuthenticationError):
                if self._closed:
                    return
                continue  # e.g. a peer without the key
            threading.Thread(
                target=self._serve, args=(conn,), daemon=True
            ).start()

    def _serve(self, conn) -> None:
        with self._lock:
            self._conns.add(conn)
        with conn:
            while not self._closed:
                try:
                    op, *args = conn.recv()
                    self._handle(conn, op, args)
                except (EOFError, OSError):
                    break
        with self._lock:
            self._conns.discard(conn)


class TcpClient:
    """A worker's end of a `TcpService` (one connection, thread-safe;
    reconnects once after a broken connection).

    Args:
        address: String. The service's `host:port`.
        authkey: Bytes. The service's key.
    """

    def __init__(self, address: str, authkey: bytes) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self._address = (host, int(port))
        self._authkey = authkey
        self._conn = None
        self._lock = threading.Lock()
        self._aborted = False

    def abort(self) -> None:
        """Ends this client from any thread: a request blocked on its
        connection fails at once (e.g. the service's host is gone), and
        so does every later one."""
        self._aborted = True
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError):
                with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                    sock.shutdown(socket.SHUT_RDWR)

    def request(self, *request, exchange: Callable | None = None):
        """Sends `request`; returns the answer, or `exchange(conn)`'s
        result when given (it sends or receives blobs after the request).

        Raises:
            OSError, EOFError: If the service cannot be reached twice.
        """
        with self._lock:
            for attempt in range(2):
                if self._aborted:
                    raise ConnectionAbortedError(
                        f"The client of {self.address} was aborted."
                    )
                try:
                    if self._conn is None:
                        self._conn = Client(
                            self._address, authkey=self._authkey
                        )
                    self._conn.send(request)
                    if exchange is not None:
                        return exchange(self._conn)
                    return self._conn.recv()
                except (OSError, EOFError):
                    self._conn = None
                    if attempt:
                        raise
