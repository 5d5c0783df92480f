"""Keras' progress bar, written to something that is not a terminal,
prints one line per epoch (what `verbose=2` prints).

Keras redraws its bar in place with `\\b` and `\\r` on every POSIX system,
so a worker's bar reached log files as one line of many kilobytes per
epoch, full of ANSI codes. While a multi-worker strategy is in use, a
`keras.utils.Progbar` draws in place only when the console is a
terminal: the launcher's console, which it names in
`KERAS_HYBRID_CONSOLE_TERMINAL`, or this process's stdout without the
launcher. Otherwise a `verbose=1` bar writes the `verbose=2` line at the
end of each epoch.

Private hooks touched: `Progbar._dynamic_display` (through
`_compat.keras.draw_progress_in_place`). Public: `Progbar.__init__`.
"""

import functools
import os
import sys

import keras

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.contract.console import CONSOLE_TERMINAL_ENV
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet


def console_is_terminal() -> bool:
    """Whether the console this process's stdout ends on is a terminal."""
    told = os.environ.get(CONSOLE_TERMINAL_ENV, "").strip()
    if told in ("0", "1"):
        return told == "1"
    return hasattr(sys.stdout, "isatty") and sys.stdout.isatty()


def _init_of(init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if console_is_terminal():
            return
        keras_compat.draw_progress_in_place(self, False)
        if self.verbose == 1:
            self.verbose = 2

    return __init__


PATCHES = PatchSet(
    "progress_bar", (Patch(keras.utils.Progbar, "__init__", _init_of),)
)
