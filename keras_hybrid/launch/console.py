"""The launcher's own messages: to stderr, next to the workers' lines,
with a prefix that tells them apart from `[rank] ` lines."""

import logging
import sys

PROG = "keras-hybrid-run"
logger = logging.getLogger("keras_hybrid.launch")


def configure() -> None:
    """Sends `keras_hybrid.launch` records to stderr as `PROG: message`
    (once per process)."""
    if logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
