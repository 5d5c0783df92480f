"""A test case that imports an example's `main.py` and runs `main()`.

Each example defines absl flags on import (some with the same names as
other examples'); they are removed again in `tearDownClass`, so tests see
FLAGS as they were.
"""

import contextlib
import importlib.util
import io
import logging
import os
import subprocess

from absl import flags
from absl.testing import flagsaver

from keras_hybrid.testing import OneProcessTestCase

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def run_example(args, timeout=240) -> subprocess.CompletedProcess:
    """Runs `args` (an example's command line) from the repository root,
    with TF's C++ logs quiet; returns the finished process."""
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        cwd=ROOT,
    )


class ExampleMainTestCase(OneProcessTestCase):
    """Set `example` (folder under `examples/`) and `tiny` (flags)."""

    example = ""
    tiny: tuple = ()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        before = set(FLAGS)
        script = os.path.join(ROOT, "examples", cls.example, "main.py")
        # A module of the package, so that it imports its siblings as
        # `examples.<name>.train` (never another example's `train`).
        spec = importlib.util.spec_from_file_location(
            f"examples.{cls.example}.main", script
        )
        cls.main_module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.main_module)
        cls.added_flags = set(FLAGS) - before

    @classmethod
    def tearDownClass(cls):
        for name in cls.added_flags:
            delattr(FLAGS, name)
        super().tearDownClass()

    def run_main(self, *flag_args, argv=()) -> str:
        """Runs `main` with `tiny` and `flag_args`; returns its log lines."""
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        absl_logger = logging.getLogger("absl")
        absl_logger.addHandler(handler)
        level = absl_logger.level
        absl_logger.setLevel(logging.INFO)
        try:
            with (
                flagsaver.flagsaver(),
                contextlib.redirect_stdout(io.StringIO()),
            ):
                was_parsed = FLAGS.is_parsed()
                FLAGS(["main.py", *self.tiny, *flag_args])
                try:
                    self.main_module.main(["main.py", *argv])
                finally:
                    if not was_parsed:
                        FLAGS.unparse_flags()
        finally:
            absl_logger.removeHandler(handler)
            absl_logger.setLevel(level)
        return stream.getvalue()

    def figures(self, log: str, marker: str) -> list[float]:
        """The comma-separated numbers after `marker` in `log`."""
        lines = [line for line in log.splitlines() if marker in line]
        self.assertEqual(len(lines), 1, log[-2000:])
        return [float(v) for v in lines[0].split(marker)[1].split(",")]
