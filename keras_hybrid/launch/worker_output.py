"""Reading worker output line by line: how a terminal would show a line,
which lines are warnings or errors, and the exceptions a worker printed.

Written by hand because no library reads another process's log stream:
the formats recognised are absl's and glog's (`W0102 12:00:00.1 ...`),
TensorFlow's C++ one (`2024-01-02 12:00:00.1: W ...`), Python's
`logging.basicConfig` one (`WARNING:name:...`) and Python tracebacks.
"""

import dataclasses
import re
import time

# ANSI control sequences (colours, cursor moves) as Keras' progress bar
# writes them.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_ABSL = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ ")
# TensorFlow's C++ INFO records, which it prints before it reads
# TF_CPP_MIN_LOG_LEVEL (oneDNN's notice, once per library), and absl's
# notice before them.
_CPP_INFO = re.compile(r"^I\d{4} [\d:.]+\s+\d+ [\w.]+\.(cc|h):\d+\] ")
_ABSL_NOTICES = (
    "WARNING: All log messages before absl::InitializeLog()",
    "WARNING: Logging before flag parsing goes to stderr.",
)
_TF_CPP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) ")
_PY_LOGGING = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):")
_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^  File "([^"]+)", line (\d+), in (.+)$')
_CHAIN = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)
_EXCEPTION = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt"
    r"|Warning|Failure))(?::\s*(.*))?$"
)
# Messages of errors that follow another worker's failure: collectives
# aborted or cut off, peers gone, the library's "stops too".
CONSEQUENCE = re.compile(
    r"aborted by an earlier failure|stops too|has exited|"
    r"Collective ops is aborted|StartAbort|Socket closed|"
    r"Connection reset|connection refused|Failed to connect|"
    r"UnavailableError|CancelledError|AbortedError|"
    r"peer.*(exited|unreachable)|Deadline Exceeded",
    re.IGNORECASE,
)
_ASSERTION = re.compile(r"assertion failed: \[(.*)\]")
_NOISE = ("Detected at node", "File ", "[[")
# Lines after an exception's first line searched for its real message.
_MORE_LINES = 200


def render_line(raw: str) -> str:
    """The text a terminal shows for `raw` (one line, no newline).

    ANSI sequences are dropped, `\\r` returns to the start of the line and
    `\\b` moves back one column, later characters overwriting earlier
    ones: a progress bar redrawn in place becomes its last state.

    Example:

    ```python
    render_line("1/2 ..\\b\\b\\r2/2 done")  # "2/2 done"
    ```
    """
    text = _ANSI.sub("", raw)
    if "\r" not in text and "\b" not in text:
        return text.rstrip()
    cells: list[str] = []
    column = 0
    for char in text:
        if char == "\r":
            column = 0
        elif char == "\b":
            column = max(0, column - 1)
        else:
            if column < len(cells):
                cells[column] = char
            else:
                cells.append(char)
            column += 1
    return "".join(cells).rstrip()


def is_tf_banner(line: str) -> bool:
    """Whether `line` is a C++ INFO record of TensorFlow's, or one of
    absl's notices that records go to stderr before it is set up."""
    return line.startswith(_ABSL_NOTICES) or bool(_CPP_INFO.match(line))


def level_of(line: str) -> str | None:
    """`"info"`, `"warning"` or `None` (no level of its own).

    Warnings, errors, fatal records and tracebacks count as `"warning"`;
    INFO and DEBUG records, and TensorFlow's banners, as `"info"`.
    """
    if line.startswith(_ABSL_NOTICES):
        return "info"
    for pattern in (_ABSL, _TF_CPP):
        match = pattern.match(line)
        if match:
            return "info" if match.group(1) == "I" else "warning"
    match = _PY_LOGGING.match(line)
    if match:
        return "info" if match.group(1) in ("DEBUG", "INFO") else "warning"
    if line.startswith(_TRACEBACK):
        return "warning"
    return None


class WarningFilter:
    """Keeps the warnings and errors of one stream, dropping INFO records.

    A line without a level of its own (a record's second line, a plan's
    table) goes with the record before it; lines before any record are
    kept.
    """

    def __init__(self) -> None:
        self._level = "warning"

    def keeps(self, line: str) -> bool:
        """Whether `line` (rendered, no newline) is a warning or error."""
        level = level_of(line)
        if level is not None:
            self._level = level
        return self._level == "warning"


@dataclasses.dataclass(frozen=True)
class WorkerException:
    """An exception a worker printed with its traceback.

    Attributes:
        type: String. The exception's class, e.g. `"RuntimeError"`.
        message: String. The first line of its message.
        frame: String. The innermost frame outside Python, site-packages
            and keras_hybrid (`file:line in function: source`), else the
            innermost frame; empty without frames.
        seconds: Float. `time.monotonic()` when it was read.
        rank: String. The worker's rank when it printed it.
    """

    type: str
    message: str
    frame: str
    seconds: float
    rank: str

    @property
    def is_consequence(self) -> bool:
        """Whether it follows another worker's failure (an aborted
        collective, a lost peer) rather than being a cause."""
        return bool(CONSEQUENCE.search(f"{self.type}: {self.message}"))

    def describe(self) -> str:
        """`Type: message`."""
        return f"{self.type}: {self.message}" if self.message else self.type


class TracebackReader:
    """Collects the exceptions one stream prints, in order.

    Args:
        rank: Callable returning the worker's rank label now.
        library_dirs: Tuple of strings. Directories whose frames are not
            the user's (Python's, site-packages, keras_hybrid).
    """

    def __init__(self, rank, library_dirs: tuple) -> None:
        self._rank = rank
        self._library_dirs = library_dirs
        self._frames: list[tuple] | None = None
        self._pending: dict | None = None
        self._exceptions: list[WorkerException] = []

    def read(self, line: str) -> None:
        """Reads one rendered line."""
        if self._pending is not None:
            if line.startswith(_TRACEBACK) or level_of(line) is not None:
                self._finish()
            elif len(self._pending["more"]) < _MORE_LINES:
                self._pending["more"].append(line)
                return
        if line.startswith(_TRACEBACK):
            self._frames = []
            return
        if self._frames is None:
            return
        match = _FRAME.match(line)
        if match:
            self._frames.append((*match.groups(), ""))
            return
        if line.startswith("    ") and self._frames:
            self._frames[-1] = (*self._frames[-1][:3], line.strip())
            return
        if not line.strip() or line.startswith(_CHAIN) or line[0] in " \t":
            return
        exception = _EXCEPTION.match(line)
        if exception is None:
            return
        self._pending = {
            "type": exception.group(1).rsplit(".", 1)[-1],
            "message": (exception.group(2) or "").strip(),
            "frame": self._user_frame(self._frames),
            "seconds": time.monotonic(),
            "rank": self._rank(),
            "more": [],
        }
        self._frames = None

    def exceptions(self) -> list[WorkerException]:
        """The exceptions read so far, oldest first."""
        self._finish()
        return list(self._exceptions)

    def _finish(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        more = pending.pop("more")
        pending["message"] = _refine(pending["message"], more)
        self._exceptions.append(WorkerException(**pending))

    def _user_frame(self, frames: list[tuple]) -> str:
        if not frames:
            return ""
        own = [f for f in frames if not f[0].startswith(self._library_dirs)]
        path, line, function, source = (own or frames)[-1]
        where = f"{path}:{line} in {function}"
        return f"{where}: {source}" if source else where


def _refine(message: str, more: list[str]) -> str:
    """The informative line of a TensorFlow error: an assertion's text, or
    the first line after "Graph execution error:"."""
    for line in more:
        match = _ASSERTION.search(line)
        if match:
            return match.group(1).replace("\\'", "'")
    if message and not message.endswith("execution error:"):
        return message
    for line in more:
        text = line.strip()
        if text and not line[0].isspace() and not text.startswith(_NOISE):
            return f"{message} {text}".strip()
    return message
