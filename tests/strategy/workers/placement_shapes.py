"""Model shapes whose tables must be found by use, wherever they sit.

Each builder returns a fresh model; `EXPECTED[name]` maps a path regex to
the role the plan must find: `"table"` (read only by gathers, so priced by
the cost rule: `gathered` or `cost`; with 3 workers and this workload it
must be partitioned), `"whole"` (read whole: dense), `"blocked"` (a
constraint that mixes rows: dense) or `"dense"`. Inputs are int32 ids of
shape (batch, 2) in [0, ROWS).
"""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

ROWS = 3000
DIM = 32
POSITIONS = 2
BATCH = 96  # global; divides over 2 and 3 workers


def make_data(steps: int, batch: int):
    rng = np.random.default_rng(7)
    x = rng.integers(0, ROWS, (steps * batch, 2)).astype("int32")
    y = rng.normal(size=(steps * batch, 1)).astype("float32")
    return x, y


# The loss each shape compiles with (`None`: its own `add_loss` only).
LOSSES = {"sampled_softmax": None}


def compile_loss(shape: str):
    return LOSSES.get(shape, "mse")


def make_optimizer(name: str):
    if name == "sgd":
        return keras.optimizers.SGD(0.5)
    if name == "momentum":  # a slot per variable, linear in the gradient
        return keras.optimizers.SGD(0.5, momentum=0.9)
    return keras.optimizers.Adam(0.01)


class Recommender(keras.Model):
    """Tables as attributes: the usual subclassed recommender."""

    def __init__(self, **kwargs):
        super().__init__(name="recommender", **kwargs)
        self.user = keras.layers.Embedding(ROWS, DIM, name="user")
        self.item = keras.layers.Embedding(ROWS, DIM, name="item")
        self.out = keras.layers.Dense(1, name="out")

    def call(self, x):
        both = ops.concatenate([self.user(x[:, 0]), self.item(x[:, 1])], -1)
        return self.out(both)


class TokenAndPosition(keras.layers.Layer):
    """A custom layer owning two tables (the keras-io Transformer one)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.token = keras.layers.Embedding(ROWS, DIM, name="token")
        self.position = keras.layers.Embedding(POSITIONS, DIM, name="pos")

    def call(self, x):
        positions = ops.arange(ops.shape(x)[-1])
        return self.token(x) + self.position(positions)


class TablesInList(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(name="in_list", **kwargs)
        self.tables = [
            keras.layers.Embedding(ROWS, DIM, name=f"t{i}") for i in range(2)
        ]
        self.out = keras.layers.Dense(1, name="out")

    def call(self, x):
        return self.out(self.tables[0](x[:, 0]) * self.tables[1](x[:, 1]))


class TablesInDict(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(name="in_dict", **kwargs)
        self.tables = {
            "a": keras.layers.Embedding(ROWS, DIM, name="a"),
            "b": keras.layers.Embedding(ROWS, DIM, name="b"),
        }
        self.out = keras.layers.Dense(1, name="out")

    def call(self, x):
        a, b = self.tables["a"](x[:, 0]), self.tables["b"](x[:, 1])
        return self.out(a - b)


class LazyTables(keras.layers.Layer):
    """Creates its table in `build`, on first call."""

    def build(self, input_shape):
        self.table = keras.layers.Embedding(ROWS, DIM, name="lazy")
        self.table.build()

    def call(self, x):
        return ops.sum(self.table(x), axis=1)


class MyEmbedding(keras.layers.Embedding):
    """A subclass of `Embedding`."""

    def call(self, inputs):
        return super().call(inputs) * 2.0


class GatherWeights(keras.layers.Layer):
    """Custom weights read only by gathers, four ways: the last as a layer
    ported from `tf.keras` reads, `tf.nn.embedding_lookup` of the Keras
    variable itself (which TF turns into a tensor first)."""

    def build(self, input_shape):
        self.w_take = self.add_weight(shape=(ROWS, DIM), name="w_take")
        self.w_gather = self.add_weight(shape=(ROWS, DIM), name="w_gather")
        self.w_lookup = self.add_weight(shape=(ROWS, DIM), name="w_lookup")
        self.w_nn = self.add_weight(shape=(ROWS, DIM), name="w_nn")

    def call(self, x):
        a = ops.take(self.w_take, x[:, 0], axis=0)
        b = tf.gather(self.w_gather, x[:, 1])
        c = tf.nn.embedding_lookup(self.w_lookup.value, x[:, 0])
        d = tf.nn.embedding_lookup(self.w_nn, x[:, 1], max_norm=0.05)
        return a + b + c + d


class Tied(keras.Model):
    """Input table reused as the output projection: read whole."""

    def __init__(self, **kwargs):
        super().__init__(name="tied", **kwargs)
        self.table = keras.layers.Embedding(ROWS, DIM, name="shared")

    def call(self, x):
        h = ops.mean(self.table(x), axis=1)
        logits = ops.matmul(h, ops.transpose(self.table.embeddings))
        return logits[:, :1]


class SlicedPositions(keras.layers.Layer):
    """keras-hub's `PositionEmbedding`: the table is sliced whole."""

    def build(self, input_shape):
        self.positions = self.add_weight(shape=(POSITIONS, DIM), name="pos")

    def call(self, x):
        table = ops.convert_to_tensor(self.positions)
        return ops.slice(table, (0, 0), (ops.shape(x)[-1], DIM))


class ReversibleLM(keras.Model):
    """keras-hub's LM pattern (GPT-2, Gemma): a `ReversibleEmbedding` (the
    base of `keras_hub.layers.ReversibleEmbedding`) embeds the ids and, in
    reverse mode, projects back to the vocabulary."""

    def __init__(self, tie_weights: bool, **kwargs):
        super().__init__(name="reversible", **kwargs)
        self.token = keras.layers.ReversibleEmbedding(
            ROWS, DIM, tie_weights=tie_weights, name="token"
        )
        self.position = SlicedPositions(name="position")

    def call(self, x):
        h = ops.mean(self.token(x) + self.position(x), axis=1)
        return self.token(h, reverse=True)[:, :1]


class ScoredInInference(keras.Model):
    """keras-rs' retrieval pattern (`BruteForceRetrieval`): training reads
    both tables by id; inference scores every candidate row, a whole read
    that only `evaluate` and `predict` make."""

    def __init__(self, **kwargs):
        super().__init__(name="retrieval", **kwargs)
        self.user = keras.layers.Embedding(ROWS, DIM, name="user")
        self.item = keras.layers.Embedding(ROWS, DIM, name="item")

    def build(self, input_shape):
        self.user.build(input_shape)
        self.item.build(input_shape)

    def call(self, x, training=False):
        user = self.user(x[:, 0])
        if training:
            return ops.sum(user * self.item(x[:, 1]), axis=1, keepdims=True)
        scores = ops.matmul(user, ops.transpose(self.item.embeddings))
        return ops.max(scores, axis=1, keepdims=True)


class GatherCell(keras.layers.Layer):
    """An RNN cell that embeds each time step's id: its table is gathered
    inside the `tf.while_loop` of `keras.layers.RNN`."""

    state_size = DIM

    def build(self, input_shape):
        self.table = self.add_weight(shape=(ROWS, DIM), name="cell_table")
        self.kernel = self.add_weight(shape=(DIM, DIM), name="kernel")

    def call(self, inputs, states):
        rows = ops.take(self.table, ops.cast(inputs[:, 0], "int32"), axis=0)
        h = ops.tanh(rows + ops.matmul(states[0], self.kernel))
        return h, [h]


class SparseBags(keras.layers.Layer):
    """Multivalent ids as a `tf.SparseTensor` (wide and deep's
    `safe_embedding_lookup_sparse`, which takes a tensor: Keras 3's
    variables are not TF's, so the layer passes `.value`) and as a
    `tf.RaggedTensor` (a ragged gather); id 0 is padding."""

    def build(self, input_shape):
        self.bag = self.add_weight(shape=(ROWS, DIM), name="bag")
        self.ragged = self.add_weight(shape=(ROWS, DIM), name="ragged")

    def call(self, ids):
        ids = tf.cast(ids, tf.int64)
        bags = tf.nn.safe_embedding_lookup_sparse(
            self.bag.value, tf.sparse.from_dense(ids), combiner="sqrtn"
        )
        ragged = tf.RaggedTensor.from_tensor(ids, padding=0)
        rows = tf.ragged.map_flat_values(tf.gather, self.ragged, ragged)
        return ops.concatenate([bags, tf.reduce_sum(rows, axis=1)], -1)


def _rnn_cell():
    ids = keras.Input((2,), dtype="int32")
    steps = keras.layers.Reshape((2, 1))(ops.cast(ids, "float32"))
    h = keras.layers.RNN(GatherCell(name="cell"), name="rnn")(steps)
    return keras.Model(ids, keras.layers.Dense(1, name="out")(h))


class SampledSoftmax(keras.Model):
    """A language model's output layer trained by sampled softmax, compiled
    without a loss: training adds `tf.nn.sampled_softmax_loss` (which
    gathers the label's and the sampled rows of the output table), and
    inference scores every row, a whole read. Its `test_step` cannot run
    (no compiled loss), so placement sees that read in `predict_step`."""

    def __init__(self, **kwargs):
        super().__init__(name="sampled", **kwargs)
        self.token = keras.layers.Embedding(ROWS, DIM, name="token")

    def build(self, input_shape):
        self.token.build(input_shape)
        self.out_w = self.add_weight(shape=(ROWS, DIM), name="out_w")
        self.out_b = self.add_weight(
            shape=(ROWS,), name="out_b", initializer="zeros"
        )

    def call(self, x, training=False):
        h = self.token(x[:, 0])
        if not training:
            return ops.matmul(h, ops.transpose(self.out_w)) + self.out_b
        labels = tf.cast(x[:, 1:], tf.int64)
        candidates = tf.range(0, ROWS, ROWS // 8, dtype=tf.int64)
        loss = tf.nn.sampled_softmax_loss(
            self.out_w,
            self.out_b,
            labels,
            h,
            num_sampled=8,
            num_classes=ROWS,
            sampled_values=(
                candidates,
                tf.fill(tf.shape(labels), 0.125),
                tf.fill([8], 0.125),
            ),
            remove_accidental_hits=False,
        )
        self.add_loss(ops.mean(loss))
        return h[:, :1]


def _sampled_softmax():
    # Built without a call: an eager call would read the table whole.
    model = SampledSoftmax()
    model.build((None, 2))
    return model


def _functional(layer_fn, name):
    ids = keras.Input((2,), dtype="int32")
    x = layer_fn(ids)
    x = keras.layers.Flatten()(x) if len(x.shape) > 2 else x
    return keras.Model(ids, keras.layers.Dense(1, name="out")(x), name=name)


def _nested():
    inner = _functional(
        lambda i: keras.layers.Embedding(ROWS, DIM, name="inner_table")(i),
        "inner",
    )

    class Outer(keras.Model):
        def __init__(self):
            super().__init__(name="outer")
            self.inner = inner

        def call(self, x):
            return self.inner(x) + 1.0

    return Outer()


def _regularized():
    return _functional(
        lambda i: keras.layers.Embedding(
            ROWS,
            DIM,
            name="reg",
            embeddings_regularizer=keras.regularizers.L1L2(1e-3, 1e-2),
            embeddings_constraint=keras.constraints.MaxNorm(0.05, axis=1),
        )(i),
        "regularized",
    )


def _column_constraint():
    return _functional(
        lambda i: keras.layers.Embedding(
            ROWS,
            DIM,
            name="colnorm",
            embeddings_constraint=keras.constraints.MaxNorm(1.0, axis=0),
        )(i),
        "column_constraint",
    )


BUILDERS = {
    "functional": lambda: _functional(
        lambda i: keras.layers.Embedding(ROWS, DIM, name="table")(i),
        "functional",
    ),
    "subclassed": Recommender,
    "subclassed_unbuilt": Recommender,
    "custom_layer": lambda: _functional(
        lambda i: TokenAndPosition(name="tok_pos")(i), "custom_layer"
    ),
    "list": TablesInList,
    "dict": TablesInDict,
    "nested": _nested,
    "lazy": lambda: _functional(lambda i: LazyTables(name="lazy")(i), "lazy"),
    "subclass_of_embedding": lambda: _functional(
        lambda i: MyEmbedding(ROWS, DIM, name="mine")(i), "subclass"
    ),
    "gather_weights": lambda: _functional(
        lambda i: GatherWeights(name="gw")(i), "gather_weights"
    ),
    "tied": Tied,
    "reversible_tied": lambda: ReversibleLM(tie_weights=True),
    "reversible_untied": lambda: ReversibleLM(tie_weights=False),
    "regularized": _regularized,
    "column_constraint": _column_constraint,
    # Built by `fit`: an eager call would read the table whole at once.
    "scored_in_inference_unbuilt": ScoredInInference,
    "sampled_softmax": _sampled_softmax,
    "rnn_cell": _rnn_cell,
    "sparse_bags": lambda: _functional(
        lambda i: SparseBags(name="bags")(i), "sparse_bags"
    ),
}

EXPECTED = {
    "functional": {"table/embeddings": "table"},
    "scored_in_inference_unbuilt": {
        "retrieval/user/embeddings": "table",
        "retrieval/item/embeddings": "whole",
    },
    "sampled_softmax": {
        "sampled/token/embeddings": "table",
        "sampled/out_w": "whole",
    },
    "subclassed": {
        "recommender/user/embeddings": "table",
        "recommender/item/embeddings": "table",
    },
    "subclassed_unbuilt": {
        "recommender/(user|item)/embeddings": "table",
    },
    "custom_layer": {
        ".*tok_pos/token/embeddings": "table",
        ".*tok_pos/pos/embeddings": "dense",
    },
    "list": {"in_list/t[01]/embeddings": "table"},
    "dict": {"in_dict/[ab]/embeddings": "table"},
    "nested": {".*inner_table/embeddings": "table"},
    "lazy": {".*lazy/embeddings": "table"},
    "subclass_of_embedding": {".*mine/embeddings": "table"},
    "gather_weights": {".*gw/w_(take|gather|lookup|nn)": "table"},
    "tied": {"tied/shared/embeddings": "whole"},
    "reversible_tied": {
        "reversible/token/embeddings": "whole",
        "reversible/position/pos": "dense",
    },
    "reversible_untied": {
        "reversible/token/embeddings": "table",
        "reversible/token/reverse_embeddings": "dense",
    },
    "regularized": {".*reg/embeddings": "table"},
    "column_constraint": {".*colnorm/embeddings": "blocked"},
    # The exchange's gradient cannot leave TF's loop gradient.
    "rnn_cell": {"rnn/cell/cell_table": "whole"},
    "sparse_bags": {".*bags/(bag|ragged)": "table"},
}
