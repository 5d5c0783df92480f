"""The library's INFO lines (the plan, resizes, recoveries, commits) reach
the console in a plain script, not only under `absl.app.run`.

The library logs through absl, which shows only warnings until its flags
are parsed. `apply()` sets absl's verbosity from `KERAS_HYBRID_LOG_LEVEL`
(`debug`, `info`, `warning`, `error`; the launcher's `--verbose` and
`--quiet` set it), or to INFO when it is unset and no `--verbosity` flag
chose otherwise; records then look as under `absl.app.run`. The setting
stays after the strategy closes, as a logging setting does.
"""

import logging
import os

from absl import flags
from absl import logging as absl_logging

from keras_hybrid.contract.console import LOG_LEVEL_ENV
from keras_hybrid.contract.console import LOG_LEVELS


def apply(environ=None) -> None:
    """Sets absl's verbosity for this process (see the module docstring).

    Raises:
        ValueError: If `KERAS_HYBRID_LOG_LEVEL` is not one of `LOG_LEVELS`.
    """
    environ = os.environ if environ is None else environ
    level = environ.get(LOG_LEVEL_ENV, "").strip().lower()
    if level and level not in LOG_LEVELS:
        raise ValueError(
            f"`{LOG_LEVEL_ENV}` must be one of {LOG_LEVELS}. Received: "
            f"{LOG_LEVEL_ENV}={environ[LOG_LEVEL_ENV]!r}."
        )
    if not level:
        if _verbosity_chosen() or absl_logging.get_verbosity() >= 0:
            return
        level = "info"
    absl_logging.set_verbosity(level)
    if not logging.getLogger().handlers:
        absl_logging.use_absl_handler()


def _verbosity_chosen() -> bool:
    """Whether `--verbosity`/`-v` was given on the command line."""
    return flags.FLAGS.is_parsed() and flags.FLAGS["verbosity"].present > 0
