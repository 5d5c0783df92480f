"""Runs one remote worker under ssh and ties its life to the launcher.

The launcher starts every remote worker as

```
ssh HOST 'cd CWD && exec env K=V ... PYTHON -m keras_hybrid.launch.remote_guard
    --grace_seconds G -- COMMAND ...'
```

and keeps the ssh client's standard input open. Without a terminal, sshd
passes no signal on and never tells the remote command that the client
went away, so a worker started directly would outlive an aborted job. The
guard closes that gap:

- each line the launcher writes (a signal number) is sent to the worker's
  process group: that is how SIGINT and SIGTERM are forwarded;
- end of file on standard input (the launcher stopped or died, the ssh
  connection broke, sshd's keep-alive gave up on a dead client) stops the
  worker: SIGTERM, then SIGKILL after `--grace_seconds`, at most
  `ORPHAN_GRACE_SECONDS` (the launcher is gone: nothing waits for the
  worker's end), or at once if a signal was already forwarded (the
  launcher has then waited its grace period already);
- the guard exits with the worker's exit code (`128 + k` after signal
  `k`), which ssh hands back to the launcher.

Importing this module does not import TensorFlow (nor does running it).
"""

import argparse
import os
import signal
import subprocess
import sys
import threading

from keras_hybrid.launch import console

_POLL_SECONDS = 0.1
# The longest a worker whose launcher is gone may take after SIGTERM: the
# job cannot go on, and nobody waits for its end.
ORPHAN_GRACE_SECONDS = 3.0


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _watch_stdin(proc: subprocess.Popen, grace_seconds: float) -> None:
    """Forwards signal numbers read from stdin; stops `proc` at EOF."""
    forwarded = False
    for line in sys.stdin:
        try:
            signum = int(line.strip())
        except ValueError:
            continue
        forwarded = True
        _signal_group(proc.pid, signum)
    if proc.poll() is not None:
        return
    if not forwarded:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(min(grace_seconds, ORPHAN_GRACE_SECONDS))
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    """Runs the worker command; returns its shell-style exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m keras_hybrid.launch.remote_guard",
        description="Run COMMAND; forward signal numbers read from stdin "
        "to it, and stop it when stdin closes.",
    )
    parser.add_argument("--grace_seconds", type=float, default=10.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("COMMAND is missing. Received no program to run.")
    try:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, start_new_session=True
        )
    except OSError as error:
        console.configure()
        console.logger.error(
            "cannot start %r on %s: %s", command[0], os.uname().nodename, error
        )
        return 127
    # Signals the guard itself gets (e.g. from a remote `kill`) go to the
    # worker too.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda s, f: _signal_group(proc.pid, s))
    watcher = threading.Thread(
        target=_watch_stdin, args=(proc, args.grace_seconds), daemon=True
    )
    watcher.start()
    returncode = proc.wait()
    return 128 - returncode if returncode < 0 else returncode


if __name__ == "__main__":
    sys.exit(main())
