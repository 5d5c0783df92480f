"""Keeps Keras' console output (progress bar, summaries) to rank 0.

Keras prints through `keras.src.utils.io_utils.print_msg`: to stdout when
interactive logging is on, else as absl INFO records. On other ranks both
are turned off: interactive logging is disabled and a filter drops the
records that `io_utils` emits. The user's own log lines are untouched.
"""

import logging

import keras
from absl import logging as absl_logging

_KERAS_PRINTER = "io_utils.py"


class _DropKerasConsole(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.filename != _KERAS_PRINTER


_FILTER = _DropKerasConsole()


def quiet_keras_console() -> None:
    """Silences Keras' progress output in this process (idempotent)."""
    keras.config.disable_interactive_logging()
    logger = absl_logging.get_absl_logger()
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
