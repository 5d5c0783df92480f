"""Worker: trains each `[source, shape, optimizer, path]` case of `--cases`
under its own `HybridStrategy` (tables partitioned), on the exchange path
`path` (`id_sources.PATH_KINDS`), and saves each case's weights before and
after. A case that raises is reported as that case's error, and the
next case runs: one model's fault does not hide the others'."""

import json
import os
import sys
import traceback

from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing.multiprocess import save_result

sys.path.insert(0, os.path.dirname(__file__))
import id_sources  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string(
    "cases", "[]", "JSON list of [source, shape, optimizer, path]."
)


def main(argv):
    del argv
    results, rank = {}, 0
    for source, shape, opt, path in json.loads(FLAGS.cases):
        with id_sources.emulated_hosts(path):
            strategy = kh.HybridStrategy(
                variable_kinds={".*table/embeddings": "sparse"},
                hierarchical=path == "hierarchical" or None,
                timeout_seconds=120,
            )
        key = "/".join((source, shape, opt, path))
        rank = strategy.rank
        try:
            with strategy:
                strategy.extended.fuse_lookups = path != "per_lookup"
                case = id_sources.train(strategy, source, shape, opt)
                case["hierarchical"] = bool(strategy.communicator.hierarchical)
        except Exception as error:  # noqa: BLE001 - reported per case
            case = {"error": "".join(traceback.format_exception(error))}
        results[key] = case
    save_result(FLAGS.out_dir, rank, results)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
