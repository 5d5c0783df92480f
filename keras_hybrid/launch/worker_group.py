"""Starts worker processes, forwards their output and supervises them."""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from keras_hybrid.launch import exit_codes
from keras_hybrid.launch.lifeline import exit_with_launcher
from keras_hybrid.launch.preloader import Preloader
from keras_hybrid.launch.root_cause import root_cause_lines
from keras_hybrid.launch.ssh import SSH_FAILURE_EXIT_CODE
from keras_hybrid.launch.worker_command import WorkerCommand
from keras_hybrid.launch.worker_streams import OutputSettings
from keras_hybrid.launch.worker_streams import WorkerStreams

logger = logging.getLogger(__name__)

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_POLL_SECONDS = 0.05
# After Ctrl-C, how long workers get before SIGKILL: a worker blocked in
# a TensorFlow op (a collective) runs no Python signal handler.
INTERRUPT_GRACE_SECONDS = 0.5
# How long to wait for the last output once every worker has exited.
_DRAIN_SECONDS = 5.0


class WorkerGroup:
    """Runs one process per `WorkerCommand` and returns one exit code.

    Each worker gets its own session (and so process group), which lets
    signals reach the worker's own children too. The group stops every
    worker as soon as one fails, the launcher gets SIGINT/SIGTERM, or the
    timeout expires: first the triggering signal (SIGTERM for a failure or
    timeout), then SIGKILL after `grace_seconds` (after at most
    `INTERRUPT_GRACE_SECONDS` for SIGINT, Ctrl-C). When a worker failed,
    the last lines name the exception that started the failure and mark
    the other workers' errors as its consequences (`root_cause`).

    A remote worker (`WorkerCommand.host` set) is an ssh client whose stdin
    stays open: the signal goes to the remote worker as a line on that
    stdin (see `remote_guard`), and SIGKILL to the local ssh client closes
    the connection, which stops the remote worker too. Failures name the
    host as well as the rank.

    Args:
        commands: List of `WorkerCommand`, in rank order.
        grace_seconds: Float. Time between the polite signal and SIGKILL.
            Defaults to `10.0`.
        stdout: Text file or `None`. Where worker stdout goes. Defaults to
            `sys.stdout` at the time `run()` is called.
        stderr: Text file or `None`. Where worker stderr goes. Defaults to
            `sys.stderr` at the time `run()` is called.
        output: `OutputSettings` or `None`. Which ranks the console shows
            whole, and the directory of per-rank log files. Defaults to
            every rank's whole output on the console.
        preload: What local Python workers fork from (`launch.preloader`):
            `"auto"`, a tuple of module names, `()` for nothing, `None`
            for `$KERAS_HYBRID_PRELOAD` (default `auto`), or a `Preloader`
            that outlives the group (several jobs fork from one server;
            its owner closes it).

    Example:

    ```python
    group = WorkerGroup([WorkerCommand(0, ["python", "-c", "1"], env)])
    exit_code = group.run(timeout=60)
    ```
    """

    def __init__(
        self,
        commands: list[WorkerCommand],
        *,
        grace_seconds: float = 10.0,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        output: OutputSettings | None = None,
        preload=None,
    ) -> None:
        self._commands = list(commands)
        self._owns_preloader = not isinstance(preload, Preloader)
        self._preloader = (
            Preloader(preload) if self._owns_preloader else preload
        )
        self._grace_seconds = grace_seconds
        self._stdout = stdout
        self._stderr = stderr
        self._output = output or OutputSettings(console_ranks=None)
        self._streams: WorkerStreams | None = None
        self._procs: list[subprocess.Popen] = []
        self._remote = [command.host is not None for command in commands]
        self._signals: list[int] = []
        self._failed = False

    def run(self, timeout: float | None = None) -> int:
        """Starts all workers and waits for the job to end.

        Args:
            timeout: Float or `None`. Seconds for the whole job; `None` or
                `0` means no limit.

        Returns:
            Int. `0` if every worker exited 0; the first failed worker's
            code (`128 + k` for signal `k`); `128 + k` if the launcher got
            signal `k`; `124` on timeout; `127` if a worker could not start.
        """
        self._streams = WorkerStreams(
            self._output,
            self._stdout or sys.stdout,
            self._stderr or sys.stderr,
        )
        with self._signals_caught():
            code = self._start_all()
            if code is None:
                code = self._supervise(timeout)
        self._drain()
        if self._owns_preloader:
            self._preloader.close()
        self._streams.close()
        if self._failed:
            for line in root_cause_lines(self._streams.exceptions()):
                logger.error("%s", line)
        return code

    @contextlib.contextmanager
    def _signals_caught(self) -> Iterator[None]:
        # Python only allows handlers in the main thread; elsewhere the
        # caller keeps its own signal handling.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.getsignal(sig) for sig in FORWARDED_SIGNALS}
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self._on_signal_received)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal_received(self, signum: int, frame: object) -> None:
        # Only record here; the supervise loop forwards within one poll.
        del frame
        self._signals.append(signum)

    def _start_all(self) -> int | None:
        for command in self._commands:
            try:
                # A remote worker's guard reads signals from this pipe and
                # stops the worker when it closes (also if we die).
                stdin = subprocess.PIPE if command.host else subprocess.DEVNULL
                proc = None
                if command.host is None:
                    proc = self._preloader.start(command.argv, command.env)
                proc = proc or subprocess.Popen(
                    command.argv,
                    env=command.env,
                    stdin=stdin,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    # A local worker dies with us (SIGKILL included).
                    preexec_fn=None if command.host else exit_with_launcher(),
                )
            except OSError as error:
                logger.error(
                    "cannot start worker rank %d%s: %s. Check that the "
                    "command exists and is executable.",
                    command.rank,
                    _on_host(command.host),
                    error,
                )
                self._stop(signal.SIGTERM)
                return exit_codes.NOT_STARTED_EXIT_CODE
            self._procs.append(proc)
            rank = command.rank
            self._streams.attach(
                proc,
                lambda rank=rank: rank,
                lambda rank=rank: str(rank),
                f"rank.{rank}.log",
            )
        return None

    def _supervise(self, timeout: float | None) -> int:
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            if self._signals:
                return self._on_launcher_signal(self._signals[0])
            failed = self._first_failure()
            if failed is not None:
                return self._on_worker_failure(failed)
            if not self._running():
                return 0
            if deadline is not None and time.monotonic() >= deadline:
                return self._on_timeout(timeout)
            time.sleep(_POLL_SECONDS)

    def _first_failure(self) -> int | None:
        for rank, proc in enumerate(self._procs):
            if proc.poll() not in (None, 0):
                return rank
        return None

    def _running(self) -> list[subprocess.Popen]:
        return [proc for proc in self._procs if proc.poll() is None]

    def _on_worker_failure(self, rank: int) -> int:
        returncode = self._procs[rank].returncode
        host = self._commands[rank].host
        logger.error(
            "worker rank %d%s exited with %s%s; %s.",
            rank,
            _on_host(host),
            exit_codes.describe_returncode(returncode),
            self._remote_hint(rank),
            _stopping(len(self._running()), "the other"),
        )
        self._failed = True
        self._stop(signal.SIGTERM)
        return exit_codes.exit_code_for(returncode)

    def _remote_hint(self, rank: int) -> str:
        host = self._commands[rank].host
        if (
            host is None
            or self._procs[rank].returncode != SSH_FAILURE_EXIT_CODE
        ):
            return ""
        ranks = [c.rank for c in self._commands if c.host == host]
        return (
            f" (ssh's own failure code: it could not reach host {host}, or "
            f"lost the connection to it; host {host} runs ranks "
            f"{', '.join(map(str, ranks))})"
        )

    def _on_launcher_signal(self, signum: int) -> int:
        logger.warning(
            "received %s; forwarding it to %d running worker(s).",
            exit_codes.signal_name(signum),
            len(self._running()),
        )
        grace = self._grace_seconds
        if signum == signal.SIGINT:
            grace = min(grace, INTERRUPT_GRACE_SECONDS)
        self._stop(signum, grace)
        return 128 + signum

    def _on_timeout(self, timeout: float) -> int:
        logger.error(
            "job exceeded --timeout %gs; %s.",
            timeout,
            _stopping(len(self._running()), "the"),
        )
        self._stop(signal.SIGTERM)
        return exit_codes.TIMEOUT_EXIT_CODE

    def _stop(self, signum: int, grace: float | None = None) -> None:
        """Sends `signum`, waits up to the grace period, then SIGKILLs."""
        grace = self._grace_seconds if grace is None else grace
        signals_seen = len(self._signals)
        # Fewer procs than commands when a start failed.
        for remote, proc in zip(self._remote, self._procs):  # noqa: B905
            if proc.poll() is not None:
                continue
            if remote:
                _send_line(proc, signum)
            else:
                _signal_group(proc, signum)
        deadline = time.monotonic() + grace
        while self._running() and time.monotonic() < deadline:
            if len(self._signals) > signals_seen:
                logger.warning("received another signal; killing workers.")
                break
            time.sleep(_POLL_SECONDS)
        survivors = self._running()
        if survivors:
            logger.warning(
                "%d worker(s) still running after %gs; sending SIGKILL.",
                len(survivors),
                grace,
            )
        for proc in self._procs:
            # Also reaches children left behind by workers already gone.
            # For a remote worker this closes its connection, and its guard
            # kills it.
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
            _close_stdin(proc)

    def _drain(self) -> None:
        for proc in self._procs:
            _close_stdin(proc)
        deadline = time.monotonic() + _DRAIN_SECONDS
        for forwarder in self._streams.forwarders:
            if not forwarder.join(max(0.0, deadline - time.monotonic())):
                logger.warning(
                    "worker output is still open after the workers exited, "
                    "probably held by a child process they left behind; "
                    "not waiting for it."
                )
                return


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _send_line(proc: subprocess.Popen, signum: int) -> None:
    # A remote guard reads signal numbers, one per line.
    try:
        proc.stdin.write(f"{int(signum)}\n".encode())
        proc.stdin.flush()
    except (OSError, ValueError):
        pass


def _close_stdin(proc: subprocess.Popen) -> None:
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _on_host(host: str | None) -> str:
    return "" if host is None else f" on host {host}"


def _stopping(count: int, article: str) -> str:
    if count == 0:
        return "no other worker is running"
    noun = "worker" if count == 1 else "workers"
    return f"stopping {article} {count} {noun}"
