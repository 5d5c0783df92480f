"""Where each worker's output goes: the console, its log file, and the
readers that remember its exceptions for the launcher's last lines."""

import dataclasses
import os
import sys
import sysconfig
import threading
from collections.abc import Callable
from typing import TextIO

from keras_hybrid.launch.output_forwarder import OutputForwarder
from keras_hybrid.launch.worker_output import TracebackReader
from keras_hybrid.launch.worker_output import WarningFilter
from keras_hybrid.launch.worker_output import WorkerException
from keras_hybrid.launch.worker_output import is_tf_banner

# `--console-ranks` value that shows every rank's whole output.
ALL_RANKS = "all"
# Default of `--console-ranks`, overridable per environment (test suites
# that read every rank's lines set it to `all`).
CONSOLE_RANKS_ENV = "KERAS_HYBRID_CONSOLE_RANKS"


def parse_console_ranks(value: str) -> frozenset[int] | None:
    """`"all"` -> `None` (every rank); `"0,2"` -> `{0, 2}`.

    Raises:
        ValueError: If `value` is neither `all` nor ranks >= 0.
    """
    if value.strip() == ALL_RANKS:
        return None
    try:
        ranks = frozenset(int(part) for part in value.split(","))
    except ValueError:
        ranks = frozenset({-1})
    if not ranks or min(ranks) < 0:
        raise ValueError(
            "`--console-ranks` must be `all` or ranks such as `0` or `0,1`. "
            f"Received: --console-ranks {value!r}."
        )
    return ranks


@dataclasses.dataclass(frozen=True)
class OutputSettings:
    """How the launcher shows its workers' output.

    Attributes:
        console_ranks: Frozenset of ints, or `None` for every rank. These
            ranks' whole output goes to the console; the other ranks'
            warnings and errors only (stderr lines that are not INFO
            records). Defaults to rank 0.
        log_dir: Optional string. A directory that gets each worker's whole
            output, stdout and stderr, in its own file (`rank.<r>.log`, or
            `task.<t>.log` in an elastic job).
        quiet_tf_banners: Bool. Keep TensorFlow's C++ INFO banners (which
            it prints whatever `TF_CPP_MIN_LOG_LEVEL` says) off the
            console; log files keep them. Defaults to `False`.
    """

    console_ranks: frozenset | None = frozenset({0})
    log_dir: str | None = None
    quiet_tf_banners: bool = False

    def shows_all(self, rank: int | None) -> bool:
        """Whether `rank`'s whole output goes to the console."""
        return self.console_ranks is None or rank in self.console_ranks


class _LockedFile:
    """One log file written by a worker's stdout and stderr threads."""

    def __init__(self, path: str, mode: str) -> None:
        self._file = open(path, mode, encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            self._file.write(text)

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class WorkerStreams:
    """Makes the forwarders of every worker of one job.

    Args:
        settings: `OutputSettings`.
        stdout: Optional text file. The console's stdout. Defaults to
            `sys.stdout` when `attach` runs.
        stderr: Optional text file. The console's stderr. Defaults to
            `sys.stderr` when `attach` runs.
    """

    def __init__(
        self,
        settings: OutputSettings | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.settings = settings or OutputSettings()
        self._stdout, self._stderr = stdout, stderr
        self._locks = (threading.Lock(), threading.Lock())
        self._readers: list[TracebackReader] = []
        self._files: list[_LockedFile] = []
        self._names: set[str] = set()
        self.forwarders: list[OutputForwarder] = []
        if self.settings.log_dir is not None:
            os.makedirs(self.settings.log_dir, exist_ok=True)

    def attach(
        self,
        proc,
        rank: Callable[[], int | None],
        label: Callable[[], str],
        log_name: str,
    ) -> None:
        """Starts forwarding `proc`'s stdout and stderr.

        Args:
            proc: `subprocess.Popen` with piped stdout and stderr.
            rank: Callable. The worker's rank now (`None` while it is not a
                member of an elastic job).
            label: Callable. The worker's prefix now, e.g. `"1"`.
            log_name: String. Its log file's name in `log_dir`.
        """
        log = self._open(log_name)
        reader = TracebackReader(label, _library_dirs())
        self._readers.append(reader)
        for pipe, sink, lock, is_err in (
            (proc.stdout, self._stdout or sys.stdout, self._locks[0], False),
            (proc.stderr, self._stderr or sys.stderr, self._locks[1], True),
        ):
            forwarder = OutputForwarder(
                pipe,
                sink,
                lambda: f"[{label()}] ",
                lock,
                live=_is_terminal(sink) and not is_err,
                keep=self._keep(rank, is_err),
                log=log,
                readers=(reader,) if is_err else (),
            )
            forwarder.start()
            self.forwarders.append(forwarder)

    def _keep(self, rank, is_err: bool):
        settings = self.settings
        if settings.console_ranks is None and not settings.quiet_tf_banners:
            return None
        return _ConsoleLines(settings, rank, is_err)

    def _open(self, name: str) -> _LockedFile | None:
        if self.settings.log_dir is None:
            return None
        # A task started again in an elastic job adds to its file.
        mode = "a" if name in self._names else "w"
        self._names.add(name)
        log = _LockedFile(os.path.join(self.settings.log_dir, name), mode)
        self._files.append(log)
        return log

    def exceptions(self) -> list[WorkerException]:
        """Every exception the workers printed, oldest first."""
        found = [e for reader in self._readers for e in reader.exceptions()]
        return sorted(found, key=lambda e: e.seconds)

    def close(self) -> None:
        """Closes the log files (after the forwarders finished)."""
        for log in self._files:
            log.close()


class _ConsoleLines:
    """Which lines of one worker stream the console gets: all of them for
    the ranks `--console-ranks` names, else its warnings and errors."""

    def __init__(self, settings: OutputSettings, rank, is_err: bool) -> None:
        self._settings = settings
        self._rank = rank
        self._is_err = is_err
        self._warnings = WarningFilter()

    def whole(self) -> bool:
        return self._settings.shows_all(self._rank())

    def __call__(self, line: str) -> bool:
        # The filter reads every line, to know the record each belongs to.
        warning = self._warnings.keeps(line)
        if self._is_err and self._settings.quiet_tf_banners:
            if is_tf_banner(line):
                return False
        return self.whole() or (self._is_err and warning)


def _is_terminal(sink: TextIO) -> bool:
    try:
        return sink.isatty()
    except (AttributeError, ValueError):
        return False


def _library_dirs() -> tuple:
    """Directories whose frames are not the user's."""
    paths = sysconfig.get_paths()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = {paths["stdlib"], paths["purelib"], paths["platlib"], package}
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs if d) + ("<frozen ",)
