"""The benchmark: `python -m keras_hybrid.benchmark` (see `__main__`).

`workloads.build(name, config, num_workers)` gives the `(model, dataset)`
of a workload for other tools (the simulator) to reuse.
"""
