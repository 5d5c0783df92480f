"""Copies a worker pipe to a launcher stream, one prefixed line at a time."""

import threading
from typing import BinaryIO
from typing import TextIO


class OutputForwarder:
    """Reads `pipe` in a daemon thread and writes `prefix + line` to `sink`.

    A last line without a trailing newline is still forwarded, with a
    newline added so the next worker's prefix starts on a fresh line.

    Args:
        pipe: Binary file. Read end of the worker's stdout or stderr.
        sink: Text file. Launcher stream to write to.
        prefix: String. Put before every line, e.g. `"[1] "`.
        lock: `threading.Lock`. Shared by all forwarders of one sink so that
            lines of different workers never interleave.

    Example:

    ```python
    forwarder = OutputForwarder(proc.stdout, sys.stdout, "[0] ", lock)
    forwarder.start()
    ...
    forwarder.join(timeout=5)
    ```
    """

    def __init__(
        self, pipe: BinaryIO, sink: TextIO, prefix: str, lock: threading.Lock
    ) -> None:
        self._pipe = pipe
        self._sink = sink
        self._prefix = prefix
        self._lock = lock
        self._sink_broken = False
        self._thread = threading.Thread(
            target=self._forward, name=f"forward {prefix.strip()}", daemon=True
        )

    def start(self) -> None:
        """Starts the reader thread."""
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Waits for end of file on the pipe.

        Args:
            timeout: Float or `None`. Seconds to wait at most.

        Returns:
            Bool. Whether the pipe reached end of file in time. It may not if
            a grandchild of the worker still holds the pipe open.
        """
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _forward(self) -> None:
        # Lines end at "\n" or at "\r": Keras' progress bar redraws itself
        # with "\r", and waiting for "\n" would show it only at epoch end.
        pending = b""
        with self._pipe:
            for chunk in iter(lambda: self._pipe.read1(65536), b""):
                pending += chunk
                *lines, pending = _split_keepends(pending)
                for line in lines:
                    self._write(self._prefix + _decode(line))
        if pending:
            self._write(self._prefix + _decode(pending) + "\n")

    def _write(self, text: str) -> None:
        # After the sink breaks (e.g. `| head`) keep draining the pipe so
        # the worker never blocks on a full pipe buffer.
        if self._sink_broken:
            return
        with self._lock:
            try:
                self._sink.write(text)
                self._sink.flush()
            except (OSError, ValueError):
                self._sink_broken = True


def _split_keepends(data: bytes) -> list[bytes]:
    """Splits after every "\n" or "\r"; the last item is the unfinished
    rest (possibly empty)."""
    parts, start = [], 0
    for i, byte in enumerate(data):
        if byte in (0x0A, 0x0D):
            parts.append(data[start : i + 1])
            start = i + 1
    parts.append(data[start:])
    return parts


def _decode(line: bytes) -> str:
    return line.decode("utf-8", errors="replace")
