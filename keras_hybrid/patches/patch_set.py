"""`Patch` and `PatchSet`: runtime patches of Keras and TensorFlow, as data.

A patch module declares what it replaces and with what; it installs
nothing itself. `registry` puts every set in while a multi-worker
`HybridStrategy` is in use and takes them out in exactly the reverse
order.
"""

import dataclasses
from collections.abc import Callable

from keras_hybrid._compat import keras as keras_compat

# The target of a patch at a private Keras site: `attribute` is then one
# of `_compat.keras.SITES`, read and written only through `_compat`.
PRIVATE_KERAS = keras_compat.PRIVATE_SITES


@dataclasses.dataclass(frozen=True)
class Patch:
    """One attribute of a Keras or TensorFlow object, replaced.

    Attributes:
        target: The public class or module that holds the attribute, or
            `PRIVATE_KERAS` for a private Keras site (then `attribute` is
            one of `_compat.keras.SITES`).
        attribute: String. The attribute's name (or the site's).
        replacement: Callable. Given what is there now (a class's
            inherited method as Python finds it, a property as the property
            object), returns what to put there instead.
    """

    target: object
    attribute: str
    replacement: Callable[[object], object]

    @property
    def name(self) -> str:
        """String. `Class.attribute`, `module.attribute` or the site."""
        if self.target is PRIVATE_KERAS:
            return self.attribute
        owner = getattr(self.target, "__name__", str(self.target))
        return f"{owner.rsplit('.', 1)[-1]}.{self.attribute}"


@dataclasses.dataclass(frozen=True)
class PatchSet:
    """The patches of one module, put in and taken out together.

    Attributes:
        name: String. The module's name, for messages.
        patches: Tuple of `Patch`, in the order they go in.
        elastic: Bool. Whether only an elastic strategy needs the set.
        one_process: Bool. Whether a strategy of one process needs the
            set too (every multi-worker strategy needs every set that is
            not elastic).
        follow: Optional callable taking the `HybridStrategy` the patches
            serve, called when the set goes in and whenever that strategy
            changes (the newest open one), and with `None` when the set is
            taken out.
    """

    name: str
    patches: tuple
    elastic: bool = False
    one_process: bool = False
    follow: Callable[[object], None] | None = None
