"""`blob_stream`: blobs as raw chunks on a connection's socket (a real
socket pair, `multiprocessing.Pipe`), between requests and answers."""

import os
import struct
import threading
from multiprocessing import Pipe

import pytest

from keras_hybrid.contract.blob_stream import BlobReader
from keras_hybrid.contract.blob_stream import BlobWriter
from keras_hybrid.contract.blob_stream import send_blob

MB = 1 << 20


class _File:
    """A binary file in memory that fails after `fail_after` writes."""

    def __init__(self, fail_after=None):
        self.data = bytearray()
        self.writes = 0
        self._fail_after = fail_after

    def write(self, data):
        if self.writes == self._fail_after:
            raise OSError(28, "No space left on device")
        self.writes += 1
        self.data += data
        return len(data)


def _in_thread(target, *args):
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def test_buffers_arrive_whole_in_order_between_messages():
    sender, receiver = Pipe()
    pieces = [b"head", bytes(range(256)) * (3 * 4096), b"", b"x" * 100]
    big = memoryview(bytearray(5 * MB + 3))  # bigger than a read buffer
    big[::4096] = b"\x07" * len(big[::4096])

    def send():
        sender.send(("write", "commit-1-g0", 0))
        writer = BlobWriter(sender)
        for piece in [*pieces, big]:
            writer.write(piece)
        writer.finish()
        sender.send("after the blob")

    thread = _in_thread(send)
    assert receiver.recv() == ("write", "commit-1-g0", 0)
    f = _File()
    BlobReader(receiver).copy_to(f)
    assert receiver.recv() == "after the blob"
    thread.join(timeout=30)
    assert bytes(f.data) == b"".join(pieces) + bytes(big)


def test_read_all_and_an_empty_blob():
    sender, receiver = Pipe()
    thread = _in_thread(
        lambda: [send_blob(sender, b"abc" * MB), send_blob(sender, b"")]
    )
    assert BlobReader(receiver).read_all() == b"abc" * MB
    assert BlobReader(receiver).read_all() == b""
    thread.join(timeout=30)


def test_a_failed_file_is_drained_and_the_connection_stays_in_step():
    sender, receiver = Pipe()

    def send():
        send_blob(sender, b"y" * (3 * MB))
        sender.send("next request")

    thread = _in_thread(send)
    blob = BlobReader(receiver)
    with pytest.raises(OSError, match="No space left"):
        blob.copy_to(_File(fail_after=1))  # in the middle of the chunk
    blob.drain()
    assert receiver.recv() == "next request"
    thread.join(timeout=30)


def test_a_sender_gone_in_a_chunk_is_an_eof_error():
    sender, receiver = Pipe()
    # As a client killed in its upload: a chunk's length, then a little.
    os.write(sender.fileno(), struct.pack("<Q", 3 * MB) + b"z" * 1000)
    sender.close()
    f = _File()
    with pytest.raises(EOFError, match="ended in a blob"):
        BlobReader(receiver).copy_to(f)
    assert bytes(f.data) == b"z" * 1000


def test_to_a_raw_file_the_bytes_are_spliced_whole(tmp_path):
    # An `io.FileIO` (the commit files' kind) takes the splice path; a
    # longer file is overwritten from its position.
    sender, receiver = Pipe()
    blob = bytes(range(256)) * (9 * 4096) + b"end"  # over two pipefuls

    def send():
        send_blob(sender, blob)
        sender.send("next request")

    thread = _in_thread(send)
    path = tmp_path / "blob"
    path.write_bytes(b"z" * (len(blob) + 100))
    with open(path, "r+b", buffering=0) as f:
        BlobReader(receiver).copy_to(f)
        assert f.tell() == len(blob)
        f.truncate()
    assert receiver.recv() == "next request"
    thread.join(timeout=30)
    assert path.read_bytes() == blob


def test_a_raw_file_that_fails_is_drained_in_step(tmp_path):
    sender, receiver = Pipe()

    def send():
        send_blob(sender, b"w" * (3 * MB))
        sender.send("next request")

    thread = _in_thread(send)
    path = tmp_path / "read-only"
    path.write_bytes(b"")
    blob = BlobReader(receiver)
    with open(path, "rb", buffering=0) as f, pytest.raises(OSError):
        blob.copy_to(f)
    blob.drain()
    assert receiver.recv() == "next request"
    thread.join(timeout=30)
