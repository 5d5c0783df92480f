"""Worker: trains every case of `train_steps` under one `HybridStrategy`
(float64; the table partitioned) and saves the final weights."""

import os
import sys

import keras
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing.multiprocess import save_result

sys.path.insert(0, os.path.dirname(__file__))
import train_steps  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")


def main(argv):
    del argv
    keras.config.set_floatx("float64")
    results = {}
    with kh.HybridStrategy(
        variable_kinds={".*table/embeddings": "sparse"}
    ) as strategy:
        for case in train_steps.CASES:
            with strategy.scope():
                model = train_steps.build(case)
            results[case] = train_steps.train(model, case)
        results["kinds"] = {p.path: p.kind for p in strategy.plan.variables}
        save_result(FLAGS.out_dir, strategy.rank, results)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
