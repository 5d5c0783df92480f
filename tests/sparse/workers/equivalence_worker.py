"""Worker: `equivalence_scenarios.train` of `--configs` in a launch of its
own (the multi-host test runs it over ssh); saves this rank's results."""

import json

import equivalence_scenarios  # noqa: I001  (sits beside this script)
from absl import app
from absl import flags

from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string(
    "configs", "[]", "JSON list of [model, optimizer, accumulation]."
)
flags.DEFINE_float("timeout", 60, "Collective timeout in seconds.")


def main(argv):
    del argv
    results = equivalence_scenarios.train(
        json.loads(FLAGS.configs), FLAGS.timeout
    )
    save_result(FLAGS.out_dir, results["rank"], results)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
