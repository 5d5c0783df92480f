"""Worker: trains each `[source, shape, optimizer]` case of `--cases` under
its own `HybridStrategy` (tables partitioned), with the fused exchange on
or off and the hierarchical exchange on or off, and saves each case's
weights before and after."""

import json
import os
import sys

from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing.multiprocess import save_result

sys.path.insert(0, os.path.dirname(__file__))
import id_sources  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string("cases", "[]", "JSON list of [source, shape, optimizer].")
flags.DEFINE_bool("fused", True, "Fused exchange of a step's lookups.")
flags.DEFINE_bool("hierarchical", False, "HybridStrategy(hierarchical=).")


def main(argv):
    del argv
    results, rank = {}, 0
    for source, shape, opt in json.loads(FLAGS.cases):
        with kh.HybridStrategy(
            variable_kinds={".*table/embeddings": "sparse"},
            hierarchical=FLAGS.hierarchical or None,
            timeout_seconds=120,
        ) as strategy:
            strategy.extended.fuse_lookups = FLAGS.fused
            rank = strategy.rank
            case = id_sources.train(strategy, source, shape, opt)
            case["hierarchical"] = bool(strategy.communicator.hierarchical)
            results[f"{source}/{shape}/{opt}"] = case
    save_result(FLAGS.out_dir, rank, results)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
