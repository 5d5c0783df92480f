"""Suite-wide settings.

Tests read every rank's lines from the launcher's console, so the
launcher shows them all (`--console-ranks all`); the tests of the
console's default set the variable back themselves.
"""

import os

os.environ.setdefault("KERAS_HYBRID_CONSOLE_RANKS", "all")
