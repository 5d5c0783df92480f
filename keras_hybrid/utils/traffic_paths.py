"""The traffic paths that collectives are charged to.

Plain data, without TensorFlow: the benchmark's and the simulator's
reports read them in processes that never start TensorFlow.
"""

# Traffic paths a collective can be charged to. `dense` is gradient and
# weight all-reduce, `sparse_*` the parameter-server exchange, `ids` the row
# ids that travel with sparse rows, `padding` the bytes sent only to keep
# collective shapes fixed, `control` small bookkeeping (metrics, capacities,
# broadcasts of initial values), `reshard` the table rows moved when the
# worker set changes (`sparse.resharding`), `commit` the buddy copies of
# table rows that elastic commits send over TCP (`elastic.buddy_sender`,
# counted when each commit starts them; no collective).
PATHS = (
    "dense",
    "sparse_pull",
    "sparse_push",
    "ids",
    "padding",
    "control",
    "reshard",
    "commit",
)
