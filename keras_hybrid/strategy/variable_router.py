"""Places each variable as the plan says, and re-places it as use is seen.

At creation a trainable variable big enough that partitioning could pay
(`cost_rule.may_pay`), with rows for every shard and a row-wise
initializer, becomes a *provisional* table: a `ShardedTable` holding this
worker's rows, so no table is ever whole on a worker before its use is
known. Everything else is created dense.

Before the first step function that reads provisional tables runs, the
strategy traces it once (`plan.use_discovery`) and hands the uses here
(`decide`): a table read only by gathers stays partitioned if the cost
rule says so; a table read whole (a tied output projection, a position
table sliced whole) or cheaper replicated is made dense, gathered once
from the shards, with its optimizer slots. An eager whole read (not a
shape query) of a provisional table makes it dense at once. The plan
(`plan()`) is `make_plan` of the facts gathered here.
"""

import dataclasses
import gc
import re
import weakref

import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.plan import cost_rule
from keras_hybrid.plan import kind_overrides
from keras_hybrid.plan import make_plan
from keras_hybrid.plan.variable_facts import VariableFacts
from keras_hybrid.sparse import replicated_gathers
from keras_hybrid.sparse import shard_regularizers
from keras_hybrid.sparse import table_factory
from keras_hybrid.sparse import table_init
from keras_hybrid.sparse.hot_rows import HotRows
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.strategy import local_variables


@dataclasses.dataclass
class _Placed:
    """A variable this router created, and what follows it. Only a weak
    reference to the Keras variable: a model that is dropped (a notebook
    building it again) takes its shards with it."""

    keras_ref: weakref.ref
    storage: tf.Variable
    slots: list = dataclasses.field(default_factory=list)
    regularizer: object = None
    constraint: object = None

    @property
    def keras_variable(self):
        return self.keras_ref()


class VariableRouter:
    """Creates and re-places variables under `HybridStrategy`.

    Args:
        communicator: The job's `Communicator`.
        variable_kinds: Optional dict `{path or regex: "dense" | "sparse"}`.
        link: Optional `cost_rule.Link` for the cost rule.
    """

    def __init__(self, communicator, variable_kinds=None, link=None) -> None:
        self._comm = communicator
        self._overrides = kind_overrides.check_overrides(variable_kinds)
        self._link = link or cost_rule.Link()
        self._facts: dict[str, VariableFacts] = {}
        self._placed: dict[str, _Placed] = {}
        self._paths: dict[int, str] = {}  # id(storage) -> path
        self._warned_paths: set[str] = set()
        self._overrides_checked = False
        # Whether a step was traced, so that placement was decided: a
        # table still provisional afterwards is one no step reads.
        self._traced = False
        # Rows of each partitioned table served to all workers at once
        # (`sparse.hot_rows`); 0 turns them off. Set by `HybridStrategy`.
        self.hot_rows = 0

    def plan(self):
        """The `RoutingPlan` of every model variable created so far; a
        table's entry has the partition it has now (after any resize)."""
        plan = make_plan(
            self._facts.values(),
            self._comm.size,
            self._overrides,
            self._link,
            min_rows=self._comm.width,
            workers=self._comm.width,
            traced=self._traced,
        )
        entries = []
        for entry in plan.variables:
            placed = self._placed.get(entry.path)
            storage = placed.storage if placed else None
            if entry.kind == "sparse" and isinstance(storage, ShardedTable):
                entry = dataclasses.replace(entry, partition=storage.partition)
            entries.append(entry)
        return dataclasses.replace(plan, variables=tuple(entries))

    def sharded_tables(self) -> list[ShardedTable]:
        """Partitioned tables and their optimizer slots, in creation order."""
        self._forget_dropped()
        tables = []
        for placed in self._placed.values():
            if isinstance(placed.storage, ShardedTable):
                tables.append(placed.storage)
                tables.extend(placed.storage.live_slots())
        return tables

    def replace_table(self, old: ShardedTable, new: ShardedTable) -> None:
        """Makes `new` stand for table or slot `old` (an elastic recovery
        gave it new storage, see `elastic.buddy_store`)."""
        for path, placed in self._placed.items():
            if placed.storage is old:
                placed.storage = new
                self._paths.pop(id(old), None)
                self._paths[id(new)] = path
                keras_var = placed.keras_variable
                regularizer = getattr(keras_var, "regularizer", None)
                if isinstance(regularizer, shard_regularizers.RowRegularizer):
                    regularizer.table = new
                return
            for i, (keras_ref, slot) in enumerate(placed.slots):
                if slot is old:
                    placed.slots[i] = (keras_ref, new)
                    return

    def path_of(self, storage) -> str:
        """The unique path of a variable's `tf.Variable`."""
        return self._paths.get(id(storage)) or getattr(
            storage, "path", storage.name
        )

    # -- creation

    def create(self, next_creator, kwargs, make_dense):
        """Returns a `ShardedTable`, or `make_dense()`'s variable."""
        info = keras_compat.variable_info(kwargs.get("initial_value"))
        colocate = kwargs.get("colocate_with")
        if isinstance(colocate, ShardedTable):
            slot = table_factory.create_slot(colocate, info, kwargs, self._comm)
            self._placed[colocate.path].slots.append(
                (weakref.ref(info[0]), slot)
            )
            return slot
        if info is None or not info[0].trainable:
            return make_dense()
        variable, initializer = info
        facts = self._facts_of(variable, initializer)
        self._facts[facts.path] = facts
        entry = make_plan(
            [facts],
            self._comm.size,
            self._overrides,
            self._link,
            min_rows=self._comm.width,
            workers=self._comm.width,
        ).variables
        if entry[0].kind == "sparse":
            storage = table_factory.create_table(
                variable, initializer, facts.path, entry[0], kwargs, self._comm
            )
            if entry[0].source == "provisional":
                storage.on_whole_read = self._on_eager_whole_read
            if self.hot_rows:
                storage.hot = HotRows(storage, self.hot_rows)
        else:
            storage = make_dense()
            if entry[0].source == "override" and len(facts.shape) == 2:
                # A table kept dense by `variable_kinds`: its gathers read
                # rows and check their ids, as a partitioned table's do.
                replicated_gathers.install(variable, facts.path, self._comm)
        self._placed[facts.path] = _Placed(weakref.ref(variable), storage)
        self._paths[id(storage)] = facts.path
        return storage

    def _facts_of(self, variable, initializer) -> VariableFacts:
        shape = tuple(int(d) for d in variable.shape)
        path = self._unique_path(variable.path)
        facts = VariableFacts(
            path,
            shape,
            tf.as_dtype(variable.dtype).size,
            keras_path=variable.path if path != variable.path else "",
        )
        # The most workers: an elastic joiner, one worker until admitted,
        # must decide as the members did (`Communicator.width`).
        workers = self._comm.width
        candidate = (
            workers > 1
            and len(shape) >= 1
            and shape[0] >= workers
            and table_init.rows_independent(initializer)
            and cost_rule.may_pay(
                shape[0], facts.row_bytes, workers, self._link
            )
        )
        return dataclasses.replace(facts, candidate=candidate)

    def _unique_path(self, path: str) -> str:
        if path in self._facts:
            # Keras models hold reference cycles: a dropped model with the
            # same names is only gone after a collection.
            gc.collect()
        self._forget_dropped()
        unique, k = path, 1
        while unique in self._facts:
            k += 1
            unique = f"{path}#{k}"
        return unique

    def _forget_dropped(self) -> None:
        """Drops the entries of variables whose model is gone."""
        for path, placed in list(self._placed.items()):
            if placed.keras_variable is None:
                self._paths.pop(id(placed.storage), None)
                del self._placed[path]
                del self._facts[path]

    # -- decisions

    def undecided(self) -> list[str]:
        """Paths of provisional tables, in creation order."""
        self._forget_dropped()
        return [
            path
            for path, placed in self._placed.items()
            if isinstance(placed.storage, ShardedTable)
            and placed.storage.on_whole_read is not None
        ]

    def prepare(self) -> None:
        """Before a discovery trace: regularizers and constraints of
        provisional tables run row by row on the shard, or block it."""
        for path in self.undecided():
            placed = self._placed[path]
            blocker = shard_regularizers.install(placed, self._comm)
            if blocker:
                self._facts[path] = dataclasses.replace(
                    self._facts[path], blocker=blocker
                )
        self._apply_plan()

    def prepare_partitioned(self) -> None:
        """Before a step's first trace: the regularizer and constraint of
        each partitioned table (one that `variable_kinds` made sparse)
        run row by row on its shard (`shard_regularizers.install`, which
        leaves tables already done as they are).

        Raises:
            ValueError: If a table's regularizer or constraint cannot run
                row by row.
        """
        self._forget_dropped()
        for path, placed in self._placed.items():
            table = placed.storage
            if not isinstance(table, ShardedTable) or table.on_whole_read:
                continue  # dense, or provisional (`prepare`)
            blocker = shard_regularizers.install(placed, self._comm)
            if blocker:
                raise ValueError(
                    f"Table {path!r} is partitioned by `variable_kinds`, "
                    f"but its {blocker}: each worker holds only some of "
                    "its rows. Keep it dense "
                    f"(`variable_kinds={{{path!r}: 'dense'}}`), or use a "
                    "penalty that sums over rows (L1, L2) and a "
                    "constraint on each row by itself "
                    "(`MaxNorm(axis=1)`)."
                )

    def decide(self, uses: dict) -> None:
        """Records the uses a discovery trace saw, and re-places."""
        self._traced = True
        for path in self.undecided():
            use = uses.get(path)
            if use is None:
                continue
            reader = use.whole_reader()
            self._facts[path] = dataclasses.replace(
                self._facts[path],
                use="whole" if reader else "gathered",
                lookups=use.lookups,
                whole_reader=reader,
            )
        self._apply_plan()

    def _apply_plan(self) -> None:
        plan = self.plan()
        for path in self.undecided():
            entry = plan[path]
            if entry.source == "provisional":
                continue
            table = self._placed[path].storage
            table.on_whole_read = None
            if entry.kind == "dense":
                self._make_dense(path, entry.reason)
            else:
                logging.info("keras-hybrid: %s stays partitioned.", path)

    def _on_eager_whole_read(self, table):
        path = self._paths[id(table)]
        self._facts[path] = dataclasses.replace(
            self._facts[path], use="whole", whole_reader="read whole eagerly"
        )
        table.on_whole_read = None
        return self._make_dense(path, "read whole eagerly")

    def _make_dense(self, path: str, why: str):
        """Gathers table `path` and its slots whole; they become dense."""
        placed = self._placed[path]
        shard_regularizers.uninstall(placed)
        with tf.init_scope():
            for keras_ref, old in [
                (placed.keras_ref, placed.storage),
                *placed.slots,
            ]:
                keras_var = keras_ref()
                if keras_var is None:
                    continue
                new = tf_compat.plain_variable(
                    self._full_value(old),
                    name=old.name.split(":")[0],
                    trainable=old.trainable,
                    like=old,
                )
                tf_compat.keep_variable_key(new, old)
                keras_compat.set_variable_storage(keras_var, new)
                if old is placed.storage:
                    replicated_gathers.uninstall(keras_var)
                    if self._facts[path].use == "gathered":
                        replicated_gathers.install(keras_var, path, self._comm)
                    placed.storage = new
                    self._paths[id(new)] = path
            placed.slots = []
        logging.info("keras-hybrid: %s is dense (%s).", path, why)
        return placed.storage

    def _full_value(self, old):
        """`old`'s whole value: gathered from every worker; zeros on an
        elastic joiner tracing before it is admitted (no collective may
        run then: the members' group is not its own yet), whose every
        weight and slot rank 0 sends when it is admitted."""
        membership = getattr(self._comm, "membership", None)
        if membership is not None and membership.joining:
            return np.zeros(old.full_shape, old.dtype.as_numpy_dtype)
        return old.gather_full()

    # -- checks and warnings

    def warn_unused_overrides(self) -> None:
        """Logs, once, `variable_kinds` keys that matched no variable (a
        typo or a path without its model prefix would otherwise change
        nothing, silently)."""
        if self._overrides_checked or not self._facts:
            return
        self._overrides_checked = True
        unused = [
            key
            for key in self._overrides
            if not any(
                key == path or re.fullmatch(key, path) for path in self._facts
            )
        ]
        if unused:
            logging.warning(
                "keras-hybrid: variable_kinds keys %s match no variable. "
                "Variable paths: %s",
                unused,
                sorted(self._facts),
            )

    def observe_gradient(self, variable, gradient) -> None:
        """Logs once per variable that a dense one got `IndexedSlices`."""
        if isinstance(variable, ShardedTable) or local_variables.is_local(
            variable
        ):
            return
        if not isinstance(gradient, tf.IndexedSlices):
            return
        path = self.path_of(variable)
        if path in self._warned_paths:
            return
        self._warned_paths.add(path)
        logging.info(
            "keras-hybrid: %s gets IndexedSlices gradients; the plan says "
            "%s. To partition it by rows, pass "
            "HybridStrategy(variable_kinds={%r: 'sparse'}).",
            path,
            self._plan_reason(path),
            path,
        )

    def _plan_reason(self, path: str) -> str:
        try:
            entry = self.plan()[path]
        except KeyError:
            return "not in the plan"
        return entry.reason
