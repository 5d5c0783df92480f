"""`BuddyReceiver` and `send_copy` over a real socket on this host: whole
copies are kept, cut or wrong ones never are, and what a sender keeps
decides what the receiver keeps."""

import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client

import numpy as np

from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.blob_stream import BlobWriter
from keras_hybrid.contract.buddy_receiver import BuddyReceiver
from keras_hybrid.contract.buddy_receiver import send_copy
from keras_hybrid.contract.tcp_service import TcpClient
from keras_hybrid.contract.tcp_service import TcpService
from keras_hybrid.testing import TestCase


def _arrays(value: float, rows: int = 1000) -> list:
    """A table and two slots of `rows` x 64 float32 (`value` + row id)."""
    ids = np.arange(rows, dtype="float32")[:, None]
    table = np.repeat(ids, 64, axis=1) + value
    return [table, table * 2, table * 3]


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
        size = send_copy(self.client, 3, "commit-10-g0", arrays, [])
        # Returned: the receiver holds it already.
        self.assertTrue(self.receiver.exists("commit-10-g0", 3))
        data = self.receiver.read("commit-10-g0", 3)
        self.assertEqual(len(data), size)
        for got, want in zip(commit_blob.read_blob(data), arrays, strict=True):
            np.testing.assert_array_equal(got, want)
        self.assertIsNone(self.receiver.read("commit-10-g0", 2))
        self.assertFalse(self.receiver.exists("commit-0-g0", 3))

    def test_copies_the_sender_no_longer_keeps_are_dropped(self):
        send_copy(self.client, 1, "commit-0-g0", _arrays(0), [])
        send_copy(self.client, 2, "commit-0-g0", _arrays(9), [])
        first = self.receiver.read("commit-0-g0", 1)
        send_copy(self.client, 1, "commit-10-g0", _arrays(1), ["commit-0-g0"])
        self.assertEqual(
            self.receiver.folders(1), ["commit-0-g0", "commit-10-g0"]
        )
        send_copy(self.client, 1, "commit-20-g0", _arrays(2), ["commit-10-g0"])
        self.assertEqual(
            self.receiver.folders(1), ["commit-10-g0", "commit-20-g0"]
        )
        # Another sender's copies are its own business.
        self.assertEqual(self.receiver.folders(2), ["commit-0-g0"])
        # The dropped copy's buffer (a spare now) takes the next one: no
        # new pages.
        send_copy(self.client, 1, "commit-30-g0", _arrays(3), ["commit-20-g0"])
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
        send_copy(self.client, 4, "commit-20-g0", arrays, [])
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
        send_copy(self.client, 5, "commit-10-g0", arrays, [])
        self.assertTrue(self.receiver.exists("commit-10-g0", 5))

    def test_a_sender_without_the_key_is_refused(self):
        stranger = TcpClient(self.receiver.address, b"0" * 16)
        with self.assertRaises((AuthenticationError, OSError, EOFError)):
            send_copy(stranger, 1, "commit-10-g0", _arrays(0), [])
        self.assertEqual(self.receiver.folders(1), [])

    def test_a_dead_receiver_fails_the_send(self):
        self.receiver.close()
        with self.assertRaises((OSError, EOFError)):
            send_copy(self.client, 1, "commit-10-g0", _arrays(0), [])


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
