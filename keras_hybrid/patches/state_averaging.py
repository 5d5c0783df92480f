"""`keras.Variable.assign` notes which variables a step assigns.

A step of a multi-worker `HybridStrategy` averages over the workers the
floating-point non-trainable state it assigned (BatchNormalization's
moving statistics: `strategy/averaged_state.py`). While a multi-worker
strategy is open, `keras.Variable.assign` (which `assign_add` and
`assign_sub` call) first tells `averaged_state.note_assigned`; outside a
step's `recording()` that does nothing.
"""

import keras

from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.strategy import averaged_state


def _assign_of(original):
    def assign(self, value):
        averaged_state.note_assigned(self)
        return original(self, value)

    return assign


PATCHES = PatchSet(
    "state_averaging",
    (Patch(keras.Variable, "assign", _assign_of),),
)
