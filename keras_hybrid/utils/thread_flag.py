"""`ThreadFlag`: a per-thread boolean set for the duration of a block."""

import contextlib
import threading


class ThreadFlag:
    """A boolean, false by default, that `scope()` makes true on this
    thread until the block ends (nesting restores the previous value)."""

    def __init__(self) -> None:
        self._state = threading.local()

    def __bool__(self) -> bool:
        return getattr(self._state, "on", False)

    @contextlib.contextmanager
    def scope(self):
        previous = bool(self)
        self._state.on = True
        try:
            yield
        finally:
            self._state.on = previous
