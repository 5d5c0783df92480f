import io
import os
import threading
import unittest

import pytest

from keras_hybrid.launch.output_forwarder import OutputForwarder

pytestmark = pytest.mark.timeout(30)


def _forward(data, sink):
    read_fd, write_fd = os.pipe()
    forwarder = OutputForwarder(
        os.fdopen(read_fd, "rb"), sink, "[3] ", threading.Lock()
    )
    forwarder.start()
    with os.fdopen(write_fd, "wb") as pipe:
        pipe.write(data)
    return forwarder.join(timeout=10)


class OutputForwarderTest(unittest.TestCase):
    def test_prefixes_lines_and_keeps_last_partial_line(self):
        sink = io.StringIO()
        self.assertTrue(_forward(b"a\n\nb\nlast", sink))
        self.assertEqual(sink.getvalue(), "[3] a\n[3] \n[3] b\n[3] last\n")

    def test_carriage_returns_end_a_line_so_progress_bars_update(self):
        sink = io.StringIO()
        self.assertTrue(_forward(b" 1/3 .\r 2/3 ..\r 3/3 ...\ndone", sink))
        self.assertEqual(
            sink.getvalue(),
            "[3]  1/3 .\r[3]  2/3 ..\r[3]  3/3 ...\n[3] done\n",
        )

    def test_progress_arrives_before_the_newline(self):
        read_fd, write_fd = os.pipe()
        sink = io.StringIO()
        forwarder = OutputForwarder(
            os.fdopen(read_fd, "rb"), sink, "[0] ", threading.Lock()
        )
        forwarder.start()
        pipe = os.fdopen(write_fd, "wb")
        pipe.write(b"step 1\r")
        pipe.flush()
        for _ in range(100):
            if sink.getvalue():
                break
            threading.Event().wait(0.05)
        self.assertEqual(sink.getvalue(), "[0] step 1\r")
        pipe.close()
        self.assertTrue(forwarder.join(timeout=10))

    def test_replaces_invalid_utf8(self):
        sink = io.StringIO()
        self.assertTrue(_forward(b"\xff ok\n", sink))
        self.assertEqual(sink.getvalue(), "[3] \ufffd ok\n")

    def test_keeps_draining_after_sink_breaks(self):
        sink = io.StringIO()
        sink.close()
        # Far more than a pipe buffer: the writer must not block.
        self.assertTrue(_forward(b"x" * 100 + b"\n" * 200_000, sink))
