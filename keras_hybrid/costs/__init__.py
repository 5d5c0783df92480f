"""The cost library: bytes and seconds of a step's collectives.

Pure models of the traffic (`traffic`, `table_exchange`, `exchange`) and
its time on a cluster (`cluster_spec`, `cost_model`), for a `Design` of
the exchange and a `Profile` of a model. The runtime prices its choices
with it (`plan.cost_rule`, `sparse.hierarchical_choice`); the simulator
(`keras_hybrid.simulate`) predicts whole jobs with it. It never imports
the runtime.
"""
