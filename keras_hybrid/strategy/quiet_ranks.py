"""Keeps Keras' console output (progress bar, summaries) to rank 0.

Keras prints its console output to stdout when interactive logging is on,
else as absl INFO records. On other ranks both are turned off: interactive
logging is disabled and a filter drops the records Keras' printer emits
(`_compat.keras.printed_by_keras`). The user's own log lines are untouched.
"""

import logging

import keras
from absl import logging as absl_logging

from keras_hybrid._compat import keras as keras_compat


class _DropKerasConsole(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not keras_compat.printed_by_keras(record)


_FILTER = _DropKerasConsole()


def quiet_keras_console() -> None:
    """Silences Keras' progress output in this process (idempotent)."""
    keras.config.disable_interactive_logging()
    logger = absl_logging.get_absl_logger()
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
