"""The fault-injection soak of elastic training (`python -m
keras_hybrid.testing.soak`, `make soak`): random jobs of 2-4 workers with
a partitioned table and Adam lose one or two workers by SIGKILL at a
random moment (`faults`), and each run must end with the weights of an
uninterrupted run or a clear error that names its cause (`runner`)."""
