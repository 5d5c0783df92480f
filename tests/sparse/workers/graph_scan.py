"""Scans traced graphs for tensors the size of a whole table.

Shared by `stays_sparse_worker.py` and its test; it defines no flags, so
the test can import it next to other modules that do.
"""

import numpy as np
import tensorflow as tf

# Ops that build a tensor whose shape is given by an input (not by the
# shapes of their inputs): one with the table's full shape is a dense
# table, even where its static output shape is unknown.
_SHAPE_INPUT = {
    "UnsortedSegmentSum": 2,
    "UnsortedSegmentMax": 2,
    "UnsortedSegmentMin": 2,
    "UnsortedSegmentProd": 2,
    "ScatterNd": 2,
    "SparseToDense": 1,
    "Fill": 0,
    "BroadcastTo": 1,
    "Zeros": 0,
}


def tf_functions(obj, seen=None):
    """Every `tf.function` reachable from `obj` through closures."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    found = []
    if isinstance(obj, tf.types.experimental.PolymorphicFunction):
        found.append(obj)
        obj = obj.python_function
    for cell in getattr(obj, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # empty cell
            continue
        if callable(value):
            found += tf_functions(value, seen)
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None:
        found += tf_functions(wrapped, seen)
    return found


def graphs(model):
    """The graphs of the traced train function and all nested functions."""
    functions = tf_functions(model.train_function)
    if not functions:
        raise AssertionError("no tf.function found in model.train_function")
    pending = [
        concrete.graph
        for function in functions
        for concrete in function._list_all_concrete_functions()
    ]
    graphs, seen = [], set()
    while pending:
        graph = pending.pop()
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        graphs.append(graph)
        for nested in graph._functions.values():
            nested_graph = getattr(nested, "graph", None)
            if nested_graph is not None:
                pending.append(nested_graph)
    return graphs


def describe(graph, op, shape):
    return {
        "graph": graph.name,
        "op": op.name,
        "type": op.type,
        "shape": shape,
        # Ops nothing consumes are pruned when the function runs.
        "used": any(out.consumers() for out in op.outputs),
    }


def _from_variable_shape(tensor, depth: int = 6) -> bool:
    """Whether `tensor` is computed from a `VariableShape` op: a shard's
    row count read when the step runs (traced steps see it as unknown)."""
    op = tensor.op
    if op.type == "VariableShape":
        return True
    if depth == 0:
        return False
    return any(_from_variable_shape(t, depth - 1) for t in op.inputs)


def inspect(graphs, num_rows, local_rows):
    """Ops with a full-table dimension, and ops with the shard's rows.

    Inside a traced step a shard's row count is unknown: its reads are
    `ReadVariableOp`s with an unknown first dimension (only shards have
    one), and a tensor built to its size takes its shape from the shard's
    `VariableShape`.
    """
    full, local = [], []
    num_ops = 0
    for graph in graphs:
        for op in graph.get_operations():
            num_ops += 1
            for out in op.outputs:
                if out.shape.rank is None or out.shape.rank == 0:
                    continue
                first = out.shape[0]
                if first == num_rows:
                    full.append(describe(graph, op, out.shape.as_list()))
                elif first == local_rows or (
                    first is None and op.type == "ReadVariableOp"
                ):
                    local.append(describe(graph, op, out.shape.as_list()))
            index = _SHAPE_INPUT.get(op.type)
            if index is not None and index < len(op.inputs):
                shape_input = op.inputs[index]
                value = tf.get_static_value(shape_input)
                if value is not None and np.size(value) >= 1:
                    first = np.ravel(value)[0]
                    if int(first) >= num_rows:
                        full.append(describe(graph, op, f"shape input {value}"))
                elif value is None and _from_variable_shape(shape_input):
                    local.append(describe(graph, op, "shard's run-time rows"))
    return full, local, num_ops
