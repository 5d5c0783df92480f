"""`BuddyReceiver` and `send_copy` over a real socket on this host: whole
copies are kept, cut or wrong ones never are, and what a sender keeps
decides what the receiver keeps."""

import subprocess
import sys
import textwrap
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client

import numpy as np

from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.blob_stream import BlobWriter
from keras_hybrid.contract.buddy_receiver import BuddyReceiver
from keras_hybrid.contract.buddy_receiver import send_copy
from keras_hybrid.contract.shared_memory import SharedBuffer
from keras_hybrid.contract.tcp_service import TcpClient
from keras_hybrid.contract.tcp_service import TcpService
from keras_hybrid.testing import TestCase


def _arrays(value: float, rows: int = 1000) -> list:
    """A table and two slots of `rows` x 64 float32 (`value` + row id)."""
    ids = np.arange(rows, dtype="float32")[:, None]
    table = np.repeat(ids, 64, axis=1) + value
    return [table, table * 2, table * 3]


def _blob(arrays) -> bytearray:
    """The commit blob of `arrays`."""
    blob = bytearray(commit_blob.blob_layout(arrays)[1])
    commit_blob.fill_blob(blob, arrays)
    return blob


def _shared(arrays) -> SharedBuffer:
    """A `SharedBuffer` holding the commit blob of `arrays`."""
    buffer = SharedBuffer.create(len(_blob(arrays)))
    commit_blob.fill_blob(buffer.map, arrays)
    return buffer


class BuddyReceiverTest(TestCase):
    def setUp(self):
        super().setUp()
        self.receiver = BuddyReceiver("localhost", bind="127.0.0.1")
        self.client = TcpClient(self.receiver.address, self.receiver.authkey)

    def tearDown(self):
        self.client.abort()
        self.receiver.close()
        super().tearDown()

    def test_a_copy_arrives_whole(self):
        arrays = _arrays(0.5)
        send_copy(self.client, 3, "commit-10-g0", _blob(arrays), [])
        size = len(_blob(arrays))
        # Returned: the receiver holds it already.
        self.assertTrue(self.receiver.exists("commit-10-g0", 3))
        data = self.receiver.read("commit-10-g0", 3)
        self.assertEqual(len(data), size)
        for got, want in zip(commit_blob.read_blob(data), arrays, strict=True):
            np.testing.assert_array_equal(got, want)
        self.assertIsNone(self.receiver.read("commit-10-g0", 2))
        self.assertFalse(self.receiver.exists("commit-0-g0", 3))

    def test_copies_the_sender_no_longer_keeps_are_dropped(self):
        send_copy(self.client, 1, "commit-0-g0", _blob(_arrays(0)), [])
        send_copy(self.client, 2, "commit-0-g0", _blob(_arrays(9)), [])
        first = self.receiver.read("commit-0-g0", 1)
        send_copy(
            self.client, 1, "commit-10-g0", _blob(_arrays(1)), ["commit-0-g0"]
        )
        self.assertEqual(
            self.receiver.folders(1), ["commit-0-g0", "commit-10-g0"]
        )
        send_copy(
            self.client, 1, "commit-20-g0", _blob(_arrays(2)), ["commit-10-g0"]
        )
        self.assertEqual(
            self.receiver.folders(1), ["commit-10-g0", "commit-20-g0"]
        )
        # Another sender's copies are its own business.
        self.assertEqual(self.receiver.folders(2), ["commit-0-g0"])
        # The dropped copy's buffer (a spare now) takes the next one: no
        # new pages.
        send_copy(
            self.client, 1, "commit-30-g0", _blob(_arrays(3)), ["commit-20-g0"]
        )
        self.assertTrue(self.receiver.read("commit-30-g0", 1) is first)
        (table, _, _) = commit_blob.read_blob(first)
        self.assertEqual(float(table[0, 0]), 3.0)

    def test_a_copy_cut_short_is_never_kept(self):
        arrays = _arrays(0)
        size = commit_blob.blob_layout(arrays)[1]
        conn = Client(
            ("127.0.0.1", self.receiver.port), authkey=self.receiver.authkey
        )
        conn.send(("copy", 4, "commit-10-g0", size, []))
        stream = BlobWriter(conn)
        commit_blob.write_blob(stream, arrays[:1])  # the sender dies here
        conn.close()
        time.sleep(0.2)
        self.assertFalse(self.receiver.exists("commit-10-g0", 4))
        # The receiver serves the next copies as before.
        send_copy(self.client, 4, "commit-20-g0", _blob(arrays), [])
        self.assertEqual(self.receiver.folders(4), ["commit-20-g0"])

    def test_a_blob_of_another_length_than_announced_is_refused(self):
        arrays = _arrays(0)
        size = commit_blob.blob_layout(arrays)[1]
        for announced in (size - 8, size + 8):

            def upload(conn):
                stream = BlobWriter(conn)
                commit_blob.write_blob(stream, arrays)
                stream.finish()
                return conn.recv()

            ok, message = self.client.request(
                "copy", 5, "commit-10-g0", announced, [], exchange=upload
            )
            self.assertFalse(ok)
            self.assertRegex(message, "blob")
        self.assertFalse(self.receiver.exists("commit-10-g0", 5))
        # The connection is still in step: a good copy goes through.
        send_copy(self.client, 5, "commit-10-g0", _blob(arrays), [])
        self.assertTrue(self.receiver.exists("commit-10-g0", 5))

    def test_a_sender_on_this_host_is_mapped_not_copied(self):
        buffer = _shared(_arrays(1))
        held = send_copy(
            self.client, 2, "commit-0-g0", buffer.map, [], shared=buffer
        )
        self.assertEqual(held, [buffer.id])
        self.assertEqual(self.receiver.arrivals, {"mapped": 1, "streamed": 0})
        # One copy in memory: the receiver reads the sender's pages.
        buffer.map[-4:] = np.float32(-1).tobytes()
        (_, _, slot) = commit_blob.read_blob(
            self.receiver.read("commit-0-g0", 2)
        )
        self.assertEqual(float(slot[-1, -1]), -1.0)
        # Once the sender keeps another commit only, the receiver lets go
        # of the buffer (the sender may write it again).
        other = _shared(_arrays(2))
        held = send_copy(
            self.client, 2, "commit-10-g0", other.map, ["commit-0-g0"], other
        )
        self.assertEqual(held, [buffer.id, other.id])
        third = _shared(_arrays(3))
        held = send_copy(
            self.client, 2, "commit-20-g0", third.map, ["commit-10-g0"], third
        )
        self.assertEqual(held, [other.id, third.id])
        self.assertEqual(
            self.receiver.folders(2), ["commit-10-g0", "commit-20-g0"]
        )

    def test_a_mapped_copy_outlives_its_sender(self):
        # Another process writes its commit into its own shared buffer,
        # gives it to this receiver, and is killed.
        code = textwrap.dedent(f"""
            import os, signal
            import numpy as np
            from keras_hybrid.contract import commit_blob
            from keras_hybrid.contract.buddy_receiver import send_copy
            from keras_hybrid.contract.shared_memory import SharedBuffer
            from keras_hybrid.contract.tcp_service import TcpClient
            table = np.arange(64000, dtype="float32").reshape(1000, 64)
            arrays = [table, table * 2, table * 3]
            buffer = SharedBuffer.create(commit_blob.blob_layout(arrays)[1])
            commit_blob.fill_blob(buffer.map, arrays)
            client = TcpClient({self.receiver.address!r},
                               {self.receiver.authkey!r})
            send_copy(client, 8, "commit-10-g0", buffer.map, [], buffer)
            os.kill(os.getpid(), signal.SIGKILL)
        """)
        done = subprocess.run([sys.executable, "-c", code], timeout=120)
        self.assertEqual(done.returncode, -9)
        self.assertEqual(self.receiver.arrivals["mapped"], 1)
        got = commit_blob.read_blob(self.receiver.read("commit-10-g0", 8))
        table = np.arange(64000, dtype="float32").reshape(1000, 64)
        for array, factor in zip(got, (1, 2, 3), strict=True):
            np.testing.assert_array_equal(array, table * factor)

    def test_a_buffer_the_receiver_cannot_map_is_streamed(self):
        # E.g. the sender is in another PID namespace behind one host name:
        # the name it gives does not open here, or opens another process's
        # buffer of the same size.
        buffer = _shared(_arrays(4))
        other = _shared(_arrays(5))
        for name in ("/proc/0/fd/0", other.name):
            buffer.name = name
            held = send_copy(
                self.client, 6, "commit-10-g0", buffer.map, [], shared=buffer
            )
            self.assertEqual(held, [])
            got = commit_blob.read_blob(self.receiver.read("commit-10-g0", 6))
            np.testing.assert_array_equal(got[1], _arrays(4)[1])
        self.assertEqual(self.receiver.arrivals, {"mapped": 0, "streamed": 2})

    def test_a_sender_without_the_key_is_refused(self):
        stranger = TcpClient(self.receiver.address, b"0" * 16)
        with self.assertRaises((AuthenticationError, OSError, EOFError)):
            send_copy(stranger, 1, "commit-10-g0", _blob(_arrays(0)), [])
        self.assertEqual(self.receiver.folders(1), [])

    def test_a_dead_receiver_fails_the_send(self):
        self.receiver.close()
        with self.assertRaises((OSError, EOFError)):
            send_copy(self.client, 1, "commit-10-g0", _blob(_arrays(0)), [])


class AbortTest(TestCase):
    def test_abort_ends_a_request_blocked_on_a_silent_service(self):
        release = threading.Event()
        service = TcpService(
            "localhost",
            lambda conn, op, args: release.wait(10),
            "silent",
            bind="127.0.0.1",
        )
        client = TcpClient(service.address, service.authkey)
        errors = []

        def ask():
            try:
                client.request("anything")
            except Exception as error:  # noqa: BLE001 - recorded for the test
                errors.append(error)

        thread = threading.Thread(target=ask, daemon=True)
        thread.start()
        time.sleep(0.2)
        self.assertTrue(thread.is_alive())
        client.abort()
        thread.join(5)
        release.set()
        service.close()
        self.assertFalse(thread.is_alive())
        self.assertIsInstance(errors[0], (OSError, EOFError))
        with self.assertRaises(ConnectionAbortedError):
            client.request("anything")
