"""The launcher's own messages: to stderr, next to the workers' lines,
with a prefix that tells them apart from `[rank] ` lines."""

import logging
import sys

PROG = "keras-hybrid-run"
logger = logging.getLogger("keras_hybrid.launch")


def configure(quiet: bool = False) -> None:
    """Sends `keras_hybrid.launch` records to stderr as `PROG: message`
    (once per process); with `quiet`, warnings and errors only."""
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    if logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
