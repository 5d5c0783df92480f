"""The fork server: imports the preloaded modules once, then forks one
local worker per request of its launcher.

Messages are JSON on one `SOCK_SEQPACKET` socket shared with the launcher
(`preloader.Preloader`):
- to the launcher, once: `{"ready": [modules]}`, or `{"error": text}`
  (with `"missing": true` when a module is not installed) before exiting;
- from the launcher: `{"argv": [...], "env": {...}, "cwd": dir}`, with the
  worker's stdin, stdout and stderr passed as descriptors;
- to the launcher: `{"pid": n}` per request (`{"error": text}` if the fork
  failed), and `{"exit": pid, "code": c}` when a worker ends, `c` as in
  `Popen.returncode` (`-k` for death by signal `k`).

The server exits when the launcher closes the socket; its workers then get
SIGKILL (`PR_SET_PDEATHSIG`), as they would with the launcher itself.

A worker forked here runs its script as `python script.py ARGS` or
`python -m module ARGS` would: `sys.argv`, `sys.path[0]` and `__main__`
are the script's, it has its own session, environment, working directory
and standard streams, an uncaught exception prints its traceback and
exits 1, and the interpreter ends as usual (threads joined, `atexit`
handlers run). It differs in what the preload already did: the preloaded
modules were imported under the first worker's environment, the process's
command line (`/proc/<pid>/cmdline`) is the server's, its name
(`/proc/<pid>/comm`, what `ps -o comm` and `pgrep` see) is the script's,
and its workers share one string-hash seed.
"""

import builtins
import ctypes
import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import tempfile
import traceback
import types

from keras_hybrid.launch import lifeline

# The largest request: the environment, argv and working directory.
MAX_MESSAGE = 1 << 20
_REAP_SECONDS = 0.05
_PR_SET_NAME = 15


def main(args: list[str]) -> None:
    """Runs the server on the inherited socket `args[0]`, preloading the
    modules `args[1:]`. Returns only in a forked worker, which then runs
    its script and exits."""
    sock = socket.socket(fileno=int(args[0]))
    modules = args[1:]
    try:
        banners = _captured(
            lambda: [importlib.import_module(n) for n in modules]
        )
    except BaseException as error:  # noqa: BLE001 - reported, then exit
        _send(
            sock,
            {
                "error": "".join(traceback.format_exception_only(error)),
                "missing": isinstance(error, ModuleNotFoundError),
            },
        )
        sys.exit(1)
    # The workers share these pages until they write them; frozen, no
    # collection in a worker scans (and so copies) them.
    gc.collect()
    gc.freeze()
    _send(sock, {"ready": modules})
    request, fds = _serve(sock)
    # Each worker's output starts with what the imports printed (TF's
    # banners), as if it had imported them itself.
    for fd, text in enumerate(banners, start=1):
        os.write(fd, text)
    _run_worker(request, fds)


def _captured(fn) -> list[bytes]:
    """Runs `fn`; returns what it wrote to file descriptors 1 and 2."""
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    saved = [os.dup(1), os.dup(2)]
    try:
        for fd, f in enumerate(files, start=1):
            os.dup2(f.fileno(), fd)
        fn()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in enumerate(saved, start=1):
            os.dup2(old, fd)
            os.close(old)
    texts = []
    for f in files:
        f.seek(0)
        texts.append(f.read())
        f.close()
    return texts


def _serve(sock: socket.socket):
    """Forks a worker per request; returns `(request, fds)` in the worker
    and exits in the server once the launcher closed the socket."""
    server = os.getpid()
    while True:
        ready, _, _ = select.select([sock], [], [], _REAP_SECONDS)
        if ready:
            message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
            if not message:
                sys.exit(0)
            request = json.loads(message)
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as error:
                _close(fds)
                _send(sock, {"error": f"cannot fork a worker: {error}"})
                continue
            if pid == 0:
                _become_worker(sock, server, fds)
                return request, fds
            _close(fds)
            _send(sock, {"pid": pid})
        _reap(sock)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        _send(sock, {"exit": pid, "code": code})


def _become_worker(sock: socket.socket, server: int, fds: list) -> None:
    """In the forked child: its own session, death with the server, and
    the launcher's pipes as standard streams."""
    os.setsid()
    lifeline.die_with_parent(server)
    sock.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    _close([fd for fd in fds if fd > 2])


def _run_worker(request: dict, fds: list) -> None:
    """Runs the requested script in this (forked) process and exits the
    way the interpreter would after `python script.py`."""
    del fds
    argv = request["argv"]
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.orig_argv = list(argv)
    _reseed()
    try:
        if argv[1] == "-m":
            _set_name(argv[2].rsplit(".", 1)[-1])
            sys.argv = [argv[2], *argv[3:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            _set_name(os.path.basename(argv[1]))
            _run_script(argv[1], argv[2:])
    except SystemExit:
        raise
    except KeyboardInterrupt:
        _print_uncaught()
        # As the interpreter ends on an uncaught Ctrl-C: by SIGINT.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001 - printed as uncaught
        _print_uncaught()
        sys.exit(1)
    sys.exit(0)


def _run_script(path: str, args: list[str]) -> None:
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as error:
        print(
            f"{sys.executable}: can't open file "
            f"{os.path.abspath(path)!r}: [Errno {error.errno}] "
            f"{error.strerror}",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = builtins
    module.__cached__ = None
    sys.modules["__main__"] = module
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102


def _print_uncaught() -> None:
    """Prints the current exception as the interpreter prints an uncaught
    one, without this module's frames."""
    kind, value, tb = sys.exc_info()
    while tb is not None and _is_own(tb.tb_frame):
        tb = tb.tb_next
    sys.excepthook(kind, value.with_traceback(tb), tb)


def _is_own(frame) -> bool:
    return frame.f_globals.get("__name__") in (__name__, "runpy")


def _reseed() -> None:
    # `random` reseeds itself after a fork; NumPy's global generator
    # would otherwise repeat the server's stream in every worker.
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _set_name(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass  # the launcher is gone; the loop sees the socket close


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
