"""`tests/horovod/test_horovod_*.py` need Horovod: they are collected only
when `KERAS_HYBRID_TEST_ENGINES` includes `horovod`, as `make
test-horovod` sets it in the `.venv-hvd` environment (TF 2.15.1, Keras
3.15, Horovod 0.28.1). `test_engine_choice.py` needs no Horovod and always
runs."""

from keras_hybrid.testing.multiprocess import engines_under_test

collect_ignore_glob = (
    [] if "horovod" in engines_under_test() else ["test_horovod_*.py"]
)
