"""Copies a worker pipe to a launcher stream, one prefixed line at a time."""

import re
import threading
from collections.abc import Callable
from typing import BinaryIO
from typing import TextIO

from keras_hybrid.launch.worker_output import render_line

# A line's pieces, each up to and with its "\r" or "\n".
_PIECES = re.compile(r"[^\r\n]*[\r\n]|[^\r\n]+$")


class OutputForwarder:
    """Reads `pipe` in a daemon thread and writes `prefix + line` to `sink`.

    A last line without a trailing newline is still forwarded, with a
    newline added so the next worker's prefix starts on a fresh line.

    Args:
        pipe: Binary file. Read end of the worker's stdout or stderr.
        sink: Text file. Launcher stream to write to.
        prefix: String, or a callable returning it for each line (an
            elastic worker's rank changes), e.g. `"[1] "`.
        lock: `threading.Lock`. Shared by all forwarders of one sink so that
            lines of different workers never interleave.
        live: Bool. Forward each piece of a line that ends in `"\\r"` as it
            comes, so a progress bar redrawn in place moves on a terminal.
            Otherwise each line goes out once complete, as a terminal would
            show it (`worker_output.render_line`: no ANSI codes, only a
            bar's last state). Defaults to `True`.
        keep: Optional callable. Given a complete line (rendered), whether
            `sink` gets it; the others go to `log` and `readers` only. If
            it has a `whole()` method that returns `True`, every line goes
            to `sink` (live too) at that moment. Defaults to keeping every
            line.
        log: Optional text file. Gets every complete line, rendered,
            without the prefix (a rank's own log file).
        readers: Tuple of objects with `read(line)`, given every complete
            line, rendered (e.g. `worker_output.TracebackReader`).

    Example:

    ```python
    forwarder = OutputForwarder(proc.stdout, sys.stdout, "[0] ", lock)
    forwarder.start()
    ...
    forwarder.join(timeout=5)
    ```
    """

    def __init__(
        self,
        pipe: BinaryIO,
        sink: TextIO,
        prefix: str | Callable[[], str],
        lock: threading.Lock,
        *,
        live: bool = True,
        keep: Callable[[str], bool] | None = None,
        log: TextIO | None = None,
        readers: tuple = (),
    ) -> None:
        self._pipe = pipe
        self._sink = sink
        self._prefix = prefix if callable(prefix) else lambda: prefix
        self._lock = lock
        self._live = live
        self._keep = keep
        self._log = log
        self._readers = tuple(readers)
        self._sink_broken = False
        name = self._prefix().strip()
        self._thread = threading.Thread(
            target=self._forward, name=f"forward {name}", daemon=True
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
        # Keras' progress bar redraws itself with "\r": live, each piece
        # up to a "\r" goes out at once, or the bar would show only at the
        # epoch's end.
        pending, shown = b"", 0
        with self._pipe:
            for chunk in iter(lambda: self._pipe.read1(65536), b""):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._line(_decode(line), _decode(line[shown:]))
                    shown = 0
                if self._is_live() and b"\r" in pending[shown:]:
                    end = pending.rindex(b"\r") + 1
                    self._write_pieces(_decode(pending[shown:end]))
                    shown = end
        if pending:
            self._line(_decode(pending), _decode(pending[shown:]))

    def _line(self, line: str, unshown: str) -> None:
        """A complete line: `unshown` is what a live sink has not had."""
        rendered = render_line(line)
        for reader in self._readers:
            reader.read(rendered)
        if self._log is not None:
            self._write_log(rendered)
        if self._is_live():
            self._write_pieces(unshown + "\n")
        elif self._keep is None or self._keep(rendered):
            self._write(self._prefix() + rendered + "\n")

    def _is_live(self) -> bool:
        if not self._live or self._keep is None:
            return self._live
        whole = getattr(self._keep, "whole", None)
        return whole is not None and whole()

    def _write_pieces(self, text: str) -> None:
        prefix = self._prefix()
        for piece in _PIECES.findall(text):
            self._write(prefix + piece)

    def _write_log(self, text: str) -> None:
        try:
            self._log.write(text + "\n")
            self._log.flush()
        except (OSError, ValueError):
            self._log = None

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


def _decode(line: bytes) -> str:
    return line.decode("utf-8", errors="replace")
