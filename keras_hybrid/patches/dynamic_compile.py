"""`Model.compile` refuses optimizers that cannot train a model's dynamic
tables.

A `DynamicEmbedding` cannot see `compile`. While a multi-worker strategy
is open, `keras.Model.compile` first resolves the optimizer and, when the
model (built: a Functional or Sequential one) holds dynamic tables,
checks it (`dynamic.optimizer_slots.check_optimizer`): an optimizer that
mixes rows (`Adafactor`, `Lamb`, `Muon`) is refused by name, and so is
gradient accumulation, which would hold one worker's rows only. A model
built later is checked at its first training step (`DynamicTable`'s slot
lookup). `clipnorm` and `global_clipnorm` take a dynamic table's norm
over every worker's rows (`patches/gradient_clipping.py`).
"""

import keras

from keras_hybrid.dynamic import optimizer_slots
from keras_hybrid.dynamic.dynamic_table import tables_of
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet

_served = {"workers": 1}


def _follow(strategy) -> None:
    _served["workers"] = 1 if strategy is None else strategy.size


def _compile_of(original):
    def compile(self, optimizer="rmsprop", *args, **kwargs):
        tables = tables_of(self.trainable_variables) if self.built else []
        if tables and optimizer is not None:
            optimizer = keras.optimizers.get(optimizer)
            optimizer_slots.check_optimizer(
                optimizer, [t.name for t in tables], _served["workers"]
            )
        return original(self, optimizer, *args, **kwargs)

    return compile


PATCHES = PatchSet(
    "dynamic_compile",
    (Patch(keras.Model, "compile", _compile_of),),
    follow=_follow,
)
