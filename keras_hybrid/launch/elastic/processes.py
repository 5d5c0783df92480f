"""The worker processes of an elastic job: on this host, or over ssh.

A remote worker runs under `remote_guard` through `ssh_command`, as the
workers of a fixed `--hosts` job do: the ssh client's stdin stays open,
signals travel as lines on it, and closing it (SIGKILL to the client, the
launcher's death, a broken link) stops the remote worker. A local worker
gets SIGKILL when the launcher dies (`lifeline`).
"""

import os
import signal
import subprocess
import sys
import time

from keras_hybrid.launch.lifeline import exit_with_launcher
from keras_hybrid.launch.preloader import Preloader
from keras_hybrid.launch.ssh import failure_hint
from keras_hybrid.launch.ssh import forwarded_env
from keras_hybrid.launch.ssh import ssh_command
from keras_hybrid.launch.worker_defaults import interpreter_path
from keras_hybrid.launch.worker_streams import OutputSettings
from keras_hybrid.launch.worker_streams import WorkerStreams

LOCAL = "localhost"
_TICK = 0.05


class ElasticProcess:
    """Starts and signals one worker.

    Args:
        task: Int. The worker's task index.
        host: String. `"localhost"` or a host reached over ssh.
        command: List of strings. Program and arguments.
        contract: Dict. The launcher's variables for this worker.
        grace_seconds: Float. What a remote guard waits between SIGTERM
            and SIGKILL when its connection closes.
        preloader: Optional `Preloader` a local worker forks from.
    """

    def __init__(
        self,
        task: int,
        host: str,
        command: list[str],
        contract: dict[str, str],
        grace_seconds: float,
        preloader: Preloader | None = None,
    ) -> None:
        self.task = task
        self.host = host
        self.remote = host != LOCAL
        if self.remote:
            argv = ssh_command(
                host,
                os.getcwd(),
                {**forwarded_env(os.environ), **contract},
                command,
                grace_seconds=grace_seconds,
            )
            env = dict(os.environ)
        else:
            path = interpreter_path(os.environ)
            argv = list(command)
            env = {**os.environ, "PATH": path, **contract}
        forked = None
        if preloader is not None and not self.remote:
            forked = preloader.start(argv, env)
        self.proc = forked or subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE if self.remote else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            # A local worker dies with the launcher (SIGKILL included);
            # a remote one's guard sees its ssh client's stdin close.
            preexec_fn=None if self.remote else exit_with_launcher(),
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdout(self):
        return self.proc.stdout

    @property
    def stderr(self):
        return self.proc.stderr

    def poll(self) -> int | None:
        return self.proc.poll()

    def send(self, sig: int) -> None:
        """Sends `sig`: to the process group here, as a line to a remote
        guard (SIGKILL ends the ssh client, and the guard kills)."""
        if self.proc.poll() is not None:
            self.close()
            return
        if self.remote and sig != signal.SIGKILL:
            try:
                self.proc.stdin.write(f"{int(sig)}\n".encode())
                self.proc.stdin.flush()
            except (OSError, ValueError):
                pass
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        """Closes a remote guard's stdin (it stops its worker on EOF)."""
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def where(self) -> str:
        """String. `task T` or `task T on host H`, for logs."""
        return f"task {self.task}" + (
            f" on host {self.host}" if self.remote else ""
        )

    def hint(self) -> str:
        """String. Why a remote worker's code may be ssh's own, or ``."""
        if not self.remote:
            return ""
        return failure_hint(self.host, self.proc.returncode)


class ElasticProcesses:
    """The job's workers by task, their forwarded output, and stopping
    them all.

    Args:
        command: List of strings. Program and arguments of every worker.
        grace_seconds: Float. Seconds between the polite signal and
            SIGKILL in `stop_all` (and a remote guard's own grace).
        rank_of: Callable. A task's rank now, or `None` while it is not a
            member (a joiner not admitted yet). Defaults to the task.
        output: Optional `OutputSettings`. Defaults to every worker's whole
            output on the console.
        preload: What local workers fork from (see `WorkerGroup`).
    """

    def __init__(
        self,
        command: list[str],
        grace_seconds: float,
        rank_of=None,
        output: OutputSettings | None = None,
        preload=None,
    ) -> None:
        self.command = list(command)
        self.preloader = Preloader(preload)
        self.grace_seconds = grace_seconds
        self.procs: dict[int, ElasticProcess] = {}
        self._rank_of = rank_of or (lambda task: task)
        self.streams = WorkerStreams(
            output or OutputSettings(console_ranks=None),
            sys.stdout,
            sys.stderr,
        )

    def label(self, task: int) -> str:
        """String. `"2"` for the member at rank 2, `"task 3"` for a task
        that is not a member."""
        rank = self._rank_of(task)
        return f"task {task}" if rank is None else str(rank)

    def start(self, task: int, host: str, contract: dict) -> ElasticProcess:
        """Starts `task` on `host` (over ssh unless `"localhost"`) with
        the launcher's `contract` variables; its output lines get its
        rank as prefix (`label`), and its log file is `task.<t>.log`."""
        proc = ElasticProcess(
            task,
            host,
            self.command,
            contract,
            self.grace_seconds,
            self.preloader,
        )
        self.procs[task] = proc
        self.streams.attach(
            proc.proc,
            lambda: self._rank_of(task),
            lambda: self.label(task),
            f"task.{task}.log",
        )
        return proc

    def signal(self, task: int, sig: int) -> None:
        self.procs[task].send(sig)

    def stop_all(self, sig: int) -> None:
        """Sends `sig` to every worker, SIGKILL after the grace period,
        and waits for their last output."""
        for proc in self.procs.values():
            proc.send(sig)
        deadline = time.monotonic() + self.grace_seconds
        while any(p.poll() is None for p in self.procs.values()):
            if time.monotonic() >= deadline:
                for proc in self.procs.values():
                    proc.send(signal.SIGKILL)
                break
            time.sleep(_TICK)
        for proc in self.procs.values():
            proc.close()
        for forwarder in self.streams.forwarders:
            forwarder.join(timeout=5.0)
        self.preloader.close()
        self.streams.close()
