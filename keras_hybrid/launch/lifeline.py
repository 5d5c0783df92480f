"""Ties a local worker's life to its launcher's.

A launcher that is SIGKILLed cannot stop its workers, and each worker runs
in a session of its own (so that signals reach its children), where no
terminal hang-up reaches it either. `exit_with_launcher` asks Linux to
SIGKILL the worker as soon as the launcher dies (`PR_SET_PDEATHSIG`, set
in the child between fork and exec). Remote workers need nothing more:
their ssh client's standard input closes with the launcher, and
`remote_guard` stops them.

Imports nothing heavy: the launcher runs without TensorFlow.
"""

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def exit_with_launcher():
    """A `preexec_fn` for `subprocess.Popen` that makes the child get
    SIGKILL when this process (the thread that starts it) ends, or None
    where the system cannot (not Linux).

    ```python
    subprocess.Popen(argv, start_new_session=True,
                     preexec_fn=exit_with_launcher())
    ```
    """
    if _LIBC is None:
        return None
    launcher = os.getpid()
    return lambda: die_with_parent(launcher)


def die_with_parent(parent: int) -> None:
    """In a forked child of `parent`: SIGKILL when `parent` (the thread
    that forked) ends; exits now if it already did. Nothing where the
    system cannot (not Linux)."""
    if _LIBC is None:
        return
    _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    # The parent may have died between the fork and the call.
    if os.getppid() != parent:
        os._exit(1)
