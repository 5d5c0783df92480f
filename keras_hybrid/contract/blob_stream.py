"""Blobs of any size over a `multiprocessing.connection.Connection`, as
raw bytes on its socket, for the commit server (`commit_server`).

A blob is a run of chunks, each an 8-byte little-endian length and that
many bytes, ended by a chunk of length 0. The sender writes each buffer
it is given as one chunk, straight from its memory (`os.write` on the
socket); the receiver moves each into a raw file through a pipe
(`os.splice`), or reads it into one reused buffer (`os.readv`) and hands
it on, so neither side copies or holds the whole blob, and both release
the GIL while the kernel moves the bytes.
`Connection.send_bytes`/`recv_bytes` would not do: a long message is
read into a growing buffer (several times slower), and short messages
copy each chunk twice more.

A `Connection` on POSIX reads exactly the bytes of each of its messages,
so requests and answers (`send`/`recv`) and blobs can follow each other
on one connection.

Imports nothing heavy: the launcher runs without TensorFlow.
"""

import contextlib
import fcntl
import io
import os
import socket
import struct

_LENGTH = struct.Struct("<Q")
# Buffers shorter than this are gathered into one chunk (e.g. an array's
# header with its rows' chunk after it).
_SMALL = 64 << 10
_READ = 1 << 20  # the receiver's buffer, and its pipe for `os.splice`
_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def write_all(f, data) -> None:
    """Writes all of `data` to the binary file `f` (a raw file may write
    part of it)."""
    data = memoryview(data).cast("B")
    while data:
        data = data[f.write(data) :]


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]


class BlobWriter(io.RawIOBase):
    """A write-only file that sends what is written to it as one blob on
    `conn`; `finish` ends the blob.

    Args:
        conn: A `multiprocessing.connection.Connection`.
    """

    def __init__(self, conn) -> None:
        super().__init__()
        self._fd = conn.fileno()
        self._small = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        data = memoryview(data).cast("B")
        if len(self._small) + len(data) < _SMALL:
            self._small += data
            return len(data)
        self._send_small()
        self._send(data)
        return len(data)

    def finish(self) -> None:
        """Sends what is gathered and the end of the blob."""
        self._send_small()
        _write_all(self._fd, memoryview(_LENGTH.pack(0)))

    def _send_small(self) -> None:
        if self._small:
            self._send(memoryview(self._small))
            self._small = bytearray()

    def _send(self, data: memoryview) -> None:
        if data:
            _write_all(self._fd, memoryview(_LENGTH.pack(len(data))))
            _write_all(self._fd, data)


def send_blob(conn, data) -> None:
    """Sends `data` (bytes-like) as one blob on `conn`."""
    writer = BlobWriter(conn)
    writer.write(data)
    writer.finish()


class BlobReader:
    """The blob arriving on `conn`, read once, in pieces.

    Raises:
        EOFError: From any method, if the connection ends (or fails)
            before the blob does.
    """

    def __init__(self, conn) -> None:
        self._fd = conn.fileno()
        self._left = 0  # bytes of the current chunk not read yet
        self._done = False

    def copy_to(self, f) -> None:
        """Writes the blob to the binary file `f`.

        To an unbuffered file (`io.FileIO`, whose position is its
        descriptor's) on Linux, the bytes go from the socket to the file
        through a pipe (`os.splice`): one copy, not two (a 19 MB blob into
        an existing file under /dev/shm: 4.6 ms of CPU against 8.3 ms).
        """
        if isinstance(f, io.FileIO) and hasattr(os, "splice"):
            self._splice_to(f.fileno())
            return
        buffer = memoryview(bytearray(_READ))
        while self._next_chunk():
            while self._left:
                got = self._read_into(buffer[: min(self._left, _READ)])
                self._left -= got
                write_all(f, buffer[:got])

    def _splice_to(self, fd: int) -> None:
        read_end, write_end = os.pipe()
        try:
            with contextlib.suppress(OSError):  # else the default size
                fcntl.fcntl(write_end, _SETPIPE_SZ, _READ)
            while self._next_chunk():
                while self._left:
                    got = self._splice(write_end, min(self._left, _READ))
                    # Read from the socket: a failed write leaves the
                    # rest of the blob to `drain`.
                    self._left -= got
                    while got:
                        got -= os.splice(read_end, fd, got)
        finally:
            os.close(read_end)
            os.close(write_end)

    def read_into(self, buffer) -> int:
        """Reads the blob into `buffer` (a writable bytes-like object),
        straight from the socket (one copy); returns its length.

        Each chunk is read in one call that waits for all of it
        (`MSG_WAITALL`): a `readv` per arrival of a few hundred kB would
        take the GIL hundreds of times per blob, from the thread that
        trains, in the process that receives.

        Raises:
            ValueError: If the blob is longer than `buffer` (the rest is
                read and dropped).
        """
        buffer = memoryview(buffer).cast("B")
        filled = 0
        while self._next_chunk():
            if self._left > len(buffer) - filled:
                least = filled + self._left
                self.drain()
                raise ValueError(
                    f"A blob longer than its buffer of {len(buffer)} bytes "
                    f"arrived (at least {least} bytes)."
                )
            end = filled + self._left
            self._fill_waiting(buffer[filled:end])
            self._left, filled = 0, end
        return filled

    def _fill_waiting(self, buffer: memoryview) -> None:
        with socket.socket(fileno=os.dup(self._fd)) as sock:
            start = 0
            while start < len(buffer):
                view = buffer[start:]
                start += _received(
                    lambda v=view: sock.recv_into(v, len(v), socket.MSG_WAITALL)
                )

    def read_all(self) -> bytes:
        """The whole blob."""
        chunks = []
        while self._next_chunk():
            chunk = memoryview(bytearray(self._left))
            self._fill(chunk)
            self._left = 0
            chunks.append(chunk)
        return b"".join(chunks)

    def drain(self) -> None:
        """Reads what is left of the blob (after a failed write)."""
        self.copy_to(_Discard())

    def _next_chunk(self) -> bool:
        """Starts the next chunk unless the blob ended; False at its end."""
        if self._left:
            return True  # a chunk left part-read by a failed `copy_to`
        if self._done:
            return False
        header = memoryview(bytearray(_LENGTH.size))
        self._fill(header)
        (self._left,) = _LENGTH.unpack(header)
        self._done = self._left == 0
        return not self._done

    def _fill(self, buffer: memoryview) -> None:
        start = 0
        while start < len(buffer):
            start += self._read_into(buffer[start:])

    def _splice(self, pipe: int, count: int) -> int:
        return _received(lambda: os.splice(self._fd, pipe, count))

    def _read_into(self, buffer: memoryview) -> int:
        return _received(lambda: os.readv(self._fd, [buffer]))


def _received(read) -> int:
    """Bytes `read()` got from the connection; `EOFError` if it failed or
    ended in a blob."""
    try:
        got = read()
    except OSError as error:
        raise EOFError(f"The connection failed in a blob: {error}") from error
    if not got:
        raise EOFError("The connection ended in a blob.")
    return got


class _Discard:
    def write(self, data) -> int:
        return len(data)
