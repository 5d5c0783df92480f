"""A worker forked by the fork server, with what the launcher uses of
`subprocess.Popen`."""

import os
import signal
import subprocess
import time

_POLL_SECONDS = 0.02


class ForkedProcess:
    """One forked worker: its pid, output pipes and exit code.

    The fork server, not the launcher, is its parent, so its exit code
    comes from the server (`Preloader.returncode`).

    Attributes:
        args: List of strings. The command it runs.
        pid: Int. Its process id; it leads its own session and process
            group.
        stdin: Always `None` (a local worker reads `/dev/null`).
        stdout, stderr: Binary files, the read ends of its output pipes.
        returncode: Int or `None`, as `Popen.returncode`.
    """

    def __init__(self, preloader, args, pid, stdout, stderr) -> None:
        self._preloader = preloader
        self.args = list(args)
        self.pid = pid
        self.stdin = None
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._preloader.returncode(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(_POLL_SECONDS)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
