"""Decides, as each variable is created, whether it is dense or sparse.

The decision is `plan.make_plan` applied to the variable (with the user's
`variable_kinds` overrides), so `HybridStrategy.plan` prints exactly what
the creator did. Sparse variables become a `ShardedTable` holding this
worker's rows; optimizer variables created next to one (Adam's m and v,
accumulators) are partitioned the same way.
"""

import re

import tensorflow as tf
from absl import logging

from keras_hybrid.plan import kind_overrides
from keras_hybrid.plan import make_plan
from keras_hybrid.sparse import table_factory
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.strategy import keras_variables


class VariableRouter:
    """Creates variables under `HybridStrategy` according to the plan.

    Args:
        communicator: The job's `Communicator`.
        variable_kinds: Optional dict `{path or regex: "dense" | "sparse"}`.
    """

    def __init__(self, communicator, variable_kinds=None) -> None:
        self._comm = communicator
        self._overrides = kind_overrides.check_overrides(variable_kinds)
        self._entries: dict[str, tuple] = {}
        self._warned_paths: set[str] = set()
        self._overrides_checked = False

    def plan(self):
        """The `RoutingPlan` of every model variable created so far."""
        return make_plan(
            self._entries.values(), self._comm.size, self._overrides
        )

    def create(self, next_creator, kwargs):
        """Returns a `ShardedTable` or calls `next_creator` (dense)."""
        info = keras_variables.describe(kwargs.get("initial_value"))
        colocate = kwargs.get("colocate_with")
        if isinstance(colocate, ShardedTable):
            return table_factory.create_slot(colocate, info, kwargs, self._comm)
        if info is None or not info.variable.trainable:
            return None
        variable = info.variable
        entry = (
            variable.path,
            tuple(variable.shape),
            tf.as_dtype(variable.dtype).size,
            keras_variables.sparse_source(info),
        )
        self._entries[variable.path] = entry
        decided = make_plan([entry], self._comm.size, self._overrides)
        plan = decided.variables[0]
        if plan.kind != "sparse":
            return None
        return table_factory.create_table(info, kwargs, plan, self._comm)

    def warn_unused_overrides(self) -> None:
        """Logs, once, `variable_kinds` keys that matched no variable (a
        typo or a path without its model prefix would otherwise change
        nothing, silently)."""
        if self._overrides_checked or not self._entries:
            return
        self._overrides_checked = True
        unused = [
            key
            for key in self._overrides
            if not any(
                key == path or re.fullmatch(key, path) for path in self._entries
            )
        ]
        if unused:
            logging.warning(
                "keras-hybrid: variable_kinds keys %s match no variable. "
                "Variable paths: %s",
                unused,
                sorted(self._entries),
            )

    def observe_gradient(self, variable, gradient) -> None:
        """Logs once per variable that a dense one got `IndexedSlices`."""
        if isinstance(variable, ShardedTable):
            return
        if not isinstance(gradient, tf.IndexedSlices):
            return
        path = getattr(variable, "path", None) or variable.name
        if path in self._warned_paths:
            return
        self._warned_paths.add(path)
        logging.warning(
            "keras-hybrid: %s gets IndexedSlices gradients but is dense "
            "(replicated); they are all-gathered. To partition it by rows, "
            "pass HybridStrategy(variable_kinds={%r: 'sparse'}).",
            path,
            path,
        )
