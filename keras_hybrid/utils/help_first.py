"""A tool's `--help` lists its flags and exits 0, without TensorFlow's
start-up banners.

Import this module first in a tool's `__main__` (before anything that
imports TensorFlow): when the command line asks for help, it sets
`TF_CPP_MIN_LOG_LEVEL=1` and `TF_ENABLE_ONEDNN_OPTS=0` (unless set), so
that importing TensorFlow prints nothing; nothing runs, so oneDNN's
numerics do not matter. `run(main)` then prints absl's usage of the
tool's own flags (its module docstring and the key flags of `__main__`)
and exits 0, where absl's `--help` exits 1 and lists only flags defined
in `__main__` itself.
"""

import os
import sys

from absl import app

HELP_FLAGS = ("-h", "-?", "--help", "--helpshort")


def asks_for_help(argv: list[str]) -> bool:
    """Whether `argv` (with the program first) asks for the short help."""
    return any(arg in HELP_FLAGS for arg in argv[1:])


def run(main) -> None:
    """`absl.app.run(main)`, except that a help request prints the tool's
    usage and flags and exits 0."""
    if asks_for_help(sys.argv):
        app.usage(shorthelp=True, writeto_stdout=True, exitcode=0)
    app.run(main)


if asks_for_help(sys.argv):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
