"""Local workers forked from one process that imported TensorFlow once:
the launcher's side.

Importing TensorFlow and Keras costs a worker 3-4 CPU-seconds before its
script's first line. The launcher instead starts one fork server per job
(`fork_server`), which imports the preloaded modules once, and each local
Python worker is a fork of it (`forked_process.ForkedProcess`). A joiner
of an elastic grow then starts in a fraction of a second.

`Preloader.start` forks a local worker from the server when the
worker's command is this launcher's Python running a script or a module
(`python train.py ...`, `python -m pkg.train ...`); any other command, a
remote worker, or a server that could not preload, gets `None`, and the
caller starts the process itself as before. The server starts with the
first worker's environment, so the modules are imported as that worker
would import them; a later worker whose Python variables (`PYTHON*`) or
Keras backend differ starts on its own.

Which modules: `"auto"` (the default) preloads TensorFlow and Keras for a
script whose source names `tensorflow` or `keras` (a `keras_hybrid`
script does), and nothing for another: a short script that never imports
them does not pay their import in the server. A list of modules preloads
those for every eligible worker; `"none"` turns the server off.
"""

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

from keras_hybrid.launch.forked_process import ForkedProcess
from keras_hybrid.launch.lifeline import exit_with_launcher

logger = logging.getLogger(__name__)

PRELOAD_ENV = "KERAS_HYBRID_PRELOAD"
AUTO = "auto"
DEFAULT_MODULES = ("tensorflow", "keras")
# What a script's source must name for `auto` to preload.
_AUTO_WORDS = (b"tensorflow", b"keras")
# Variables read while the modules import: a worker whose values differ
# from the server's does not fork from it.
_IMPORT_VARS = ("KERAS_BACKEND", "KERAS_HOME")
_READY_SECONDS = 300.0
_MAX_MESSAGE = 1 << 16


def parse_modules(text: str | None):
    """`"auto"`, or the tuple of module names `text` lists (comma
    separated; `""` or `"none"` for none).

    Raises:
        ValueError: If a name is not a dotted Python module name.
    """
    text = (text if text is not None else AUTO).strip()
    if text == AUTO:
        return AUTO
    if text in ("", "none"):
        return ()
    names = tuple(n.strip() for n in text.split(","))
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(
                "--preload takes `auto`, `none` or comma-separated module "
                f"names. Received: {text!r}."
            )
    return names


class Preloader:
    """Forks a job's local Python workers from one server process.

    Args:
        modules: `"auto"`, a tuple of module names, or `None` for
            `$KERAS_HYBRID_PRELOAD` (default `auto`).

    Example:

    ```python
    preloader = Preloader()
    proc = preloader.start(argv, env)  # or None: start it yourself
    ...
    preloader.close()  # after the workers ended
    ```
    """

    def __init__(self, modules=None) -> None:
        if modules is None:
            modules = parse_modules(os.environ.get(PRELOAD_ENV))
        self.modules = modules
        self._lock = threading.Lock()
        self._server: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._env: dict | None = None
        self._off = modules == ()
        self._codes: dict[int, int] = {}
        self._live: set[int] = set()

    def start(self, argv: list[str], env: dict[str, str]):
        """A `ForkedProcess` running `argv` with `env`, or `None` when the
        caller must start it (see the module docstring)."""
        argv = [os.fspath(a) for a in argv]
        with self._lock:
            if self._off or not self._eligible(argv, env):
                return None
            if self._server is None and not self._start_server(argv, env):
                return None
            if any(
                env.get(k) != self._env.get(k) for k in _vars(env, self._env)
            ):
                return None
            return self._fork(argv, env)

    def returncode(self, pid: int) -> int | None:
        """The exit code of worker `pid` once it ended, else `None`."""
        with self._lock:
            self._pump(block=False)
            return self._codes.get(pid)

    def close(self) -> None:
        """Stops the server (any worker still running gets SIGKILL)."""
        with self._lock:
            self._stop_server()

    def _stop_server(self) -> None:
        if self._sock is not None:
            self._pump(block=False)  # exit codes already sent
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._server is not None:
            try:
                self._server.wait(5.0)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
        # Workers still running died with the server (`PR_SET_PDEATHSIG`).
        for pid in self._live:
            self._codes.setdefault(pid, -9)
        self._live.clear()
        self._off = True

    # -- starting

    def _eligible(self, argv: list[str], env: dict) -> bool:
        if len(argv) < 2 or not _is_this_python(argv[0], env):
            return False
        if argv[1] == "-m":
            # `auto` cannot read a module's source without importing its
            # packages here.
            return len(argv) > 2 and self.modules != AUTO
        if argv[1].startswith("-"):
            return False  # interpreter options: run it as given
        return self.modules != AUTO or _names_keras(argv[1])

    def _start_server(self, argv: list[str], env: dict) -> bool:
        auto = self.modules == AUTO
        modules = DEFAULT_MODULES if auto else self.modules
        try:
            ours, theirs = socket.socketpair(
                socket.AF_UNIX, socket.SOCK_SEQPACKET
            )
        except OSError as error:  # e.g. no SOCK_SEQPACKET on this system
            return self._give_up(f"no socket for it: {error}", False)
        package_root = os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        )
        code = (
            "import sys; sys.path.insert(0, sys.argv.pop(1)); "
            "from keras_hybrid.launch import fork_server; "
            "sys.path.pop(0); fork_server.main(sys.argv[1:])"
        )
        try:
            self._server = subprocess.Popen(
                [argv[0], "-c", code, package_root, str(theirs.fileno())]
                + list(modules),
                env=env,
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=exit_with_launcher(),
            )
        except OSError as error:
            ours.close()
            return self._give_up(f"it could not start: {error}", False)
        finally:
            theirs.close()
        self._sock, self._env = ours, dict(env)
        message = self._pump(block=True, until="ready")
        if message is None or "error" in message:
            error = "it ended" if message is None else message["error"]
            # Without TensorFlow installed, `auto` has nothing to preload.
            quiet = bool(message and message.get("missing"))
            self._stop_server()
            return self._give_up(error.strip(), quiet and auto)
        logger.info(
            "local workers fork from one process that "
            "imported %s once (--preload).",
            ", ".join(modules),
        )
        return True

    def _give_up(self, why: str, quiet: bool) -> bool:
        self._off = True
        (logger.info if quiet else logger.warning)(
            "the preloading fork server is off, each "
            "worker imports its modules itself: %s",
            why,
        )
        return False

    def _fork(self, argv: list[str], env: dict) -> ForkedProcess | None:
        pipes = [os.pipe(), os.pipe()]
        devnull = os.open(os.devnull, os.O_RDONLY)
        fds = [devnull, pipes[0][1], pipes[1][1]]
        request = {"argv": list(argv), "env": dict(env), "cwd": os.getcwd()}
        try:
            socket.send_fds(self._sock, [json.dumps(request).encode()], fds)
            reply = self._pump(block=True, until="pid")
        except OSError as error:
            reply = {"error": f"the fork server is gone ({error})"}
        finally:
            for fd in fds:
                os.close(fd)
        if reply is None or "error" in reply:
            for read_end, _ in pipes:
                os.close(read_end)
            error = "it ended" if reply is None else reply["error"]
            raise OSError(f"the preloading fork server failed: {error}")
        pid = reply["pid"]
        self._live.add(pid)
        return ForkedProcess(
            self,
            argv,
            pid,
            os.fdopen(pipes[0][0], "rb"),
            os.fdopen(pipes[1][0], "rb"),
        )

    # -- messages

    def _pump(self, block: bool, until: str | None = None):
        """Reads the server's messages (exit codes are kept); returns the
        first with key `until`, `None` if the server ended first."""
        deadline = time.monotonic() + _READY_SECONDS
        while self._sock is not None:
            timeout = max(0.0, deadline - time.monotonic()) if block else 0.0
            self._sock.settimeout(timeout)
            try:
                data = self._sock.recv(_MAX_MESSAGE)
            except (BlockingIOError, TimeoutError):
                return None
            except OSError:
                data = b""
            if not data:
                self._server_ended()
                return None
            message = json.loads(data)
            if "exit" in message:
                self._codes[message["exit"]] = message["code"]
                self._live.discard(message["exit"])
            elif until is not None and (until in message or "error" in message):
                return message
        return None

    def _server_ended(self) -> None:
        # Its workers got SIGKILL with it (`PR_SET_PDEATHSIG`).
        if self._live:
            logger.error(
                "the preloading fork server ended while "
                "%d worker(s) ran; they were killed.",
                len(self._live),
            )
        for pid in self._live:
            self._codes.setdefault(pid, -9)
        self._live.clear()
        self._sock.close()
        self._sock = None
        self._off = True


def _vars(*envs: dict) -> list[str]:
    names = {k for env in envs for k in env if k.startswith("PYTHON")}
    return sorted(names | set(_IMPORT_VARS))


def _is_this_python(program: str, env: dict) -> bool:
    """Whether `program` (found on the worker's `PATH`) is this launcher's
    interpreter, in the same environment (same `bin` directory)."""
    found = shutil.which(program, path=env.get("PATH"))
    if found is None:
        return False
    found = os.path.abspath(found)
    ours = os.path.abspath(sys.executable)
    return os.path.dirname(found) == os.path.dirname(ours) and (
        os.path.realpath(found) == os.path.realpath(ours)
    )


def _names_keras(script: str) -> bool:
    try:
        with open(script, "rb") as f:
            source = f.read(1 << 20)
    except OSError:
        return False
    return any(word in source for word in _AUTO_WORDS)
