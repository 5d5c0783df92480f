"""Scenario for the shared pool: trains each `[source, shape, optimizer,
path]` case under its own `HybridStrategy` (tables partitioned), on the
exchange path `path` (`id_sources.PATH_KINDS`), and returns each case's
weights before and after. A case that raises is reported as that case's
error, and the next case runs: one model's fault does not hide the
others'."""

import os
import sys
import traceback

import keras_hybrid as kh

sys.path.insert(0, os.path.dirname(__file__))
import id_sources  # noqa: E402


def train(cases: list) -> dict:
    """Case key `source/shape/optimizer/path` -> this rank's result."""
    results = {}
    for source, shape, opt, path in cases:
        with id_sources.emulated_hosts(path):
            strategy = kh.HybridStrategy(
                variable_kinds={".*table/embeddings": "sparse"},
                hierarchical=path == "hierarchical" or None,
                timeout_seconds=120,
            )
        key = "/".join((source, shape, opt, path))
        try:
            with strategy:
                strategy.extended.fuse_lookups = path != "per_lookup"
                case = id_sources.train(strategy, source, shape, opt)
                case["hierarchical"] = bool(strategy.communicator.hierarchical)
        except Exception as error:  # noqa: BLE001 - reported per case
            case = {"error": "".join(traceback.format_exception(error))}
        results[key] = case
    return results
