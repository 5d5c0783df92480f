"""Pool scenario: trains every model kind with SGD and Adam, returns what
this rank saw.

Ranks seed differently on purpose: the strategy must broadcast rank 0's
initial values.
"""

import keras
import numpy as np
import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.testing import models


def train(
    configs: list,
    accumulation: int = 0,
    dataset: str = "",
    epochs: int = 3,
    batch_size: int = 48,
    num_samples: int = 240,
) -> dict:
    """Trains each [kind, optimizer] of `configs` on one strategy.

    Args:
        configs: List of [kind, optimizer] pairs.
        accumulation: Int. `gradient_accumulation_steps`, 0 for none.
        dataset: String. Feed arrays (`""`), or a `tf.data.Dataset` of
            global batches (`"global"`), that dataset distributed by the
            strategy (`"distributed"`, which `fit` must not split again),
            or a pipeline per worker from
            `distribute_datasets_from_function` (`"per_worker"`: each
            worker batches its shard of the rows), or sharded by the
            script itself (`"sharded"`: `shard(size, rank)`).
        epochs: Int. Epochs.
        batch_size: Int. Global batch size.
        num_samples: Int. Samples.
    """
    with kh.HybridStrategy(timeout_seconds=60) as strategy:
        results = {
            f"{kind}/{opt}": _train_one(
                strategy,
                kind,
                opt,
                accumulation,
                dataset,
                epochs,
                batch_size,
                num_samples,
            )
            for kind, opt in configs
        }
        results["engine"] = strategy.engine
        return results


def _train_one(
    strategy, kind, optimizer, accumulation, dataset, epochs, batch, samples
):
    x, y = models.make_data(samples)
    extra = {}
    if accumulation:
        extra["gradient_accumulation_steps"] = accumulation
    with strategy.scope():
        model = models.build_model(kind, seed=100 + strategy.rank)
        models.compile_model(model, optimizer, **extra)
    before = strategy.communicator.stats.snapshot()
    if dataset:
        history = model.fit(
            _dataset(strategy, dataset, x, y, batch), epochs=epochs, verbose=0
        )
    else:
        history = model.fit(
            x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0
        )
    comm = strategy.communicator.stats.delta(before)
    evaluation = model.evaluate(x, y, batch_size=batch, verbose=0)
    return {
        "weights": model.get_weights(),
        "history": history.history,
        "evaluate": evaluation,
        "comm": comm,
    }


def _dataset(strategy, how: str, x, y, batch: int):
    rows = tf.data.Dataset.from_tensor_slices((x, y))
    if how == "global":
        return rows.batch(batch)
    if how == "distributed":
        return strategy.experimental_distribute_dataset(rows.batch(batch))

    def per_worker(context):
        shard = rows.shard(
            context.num_input_pipelines, context.input_pipeline_id
        )
        return shard.batch(context.get_per_replica_batch_size(batch))

    if how == "sharded":  # as a script written for Horovod shards it
        shard = rows.shard(strategy.size, strategy.rank)
        return shard.batch(batch // strategy.size)
    assert how == "per_worker", how
    return strategy.distribute_datasets_from_function(per_worker)


def apply_outside_step() -> dict:
    """A `tf.function` of the user's own that calls the model and
    `optimizer.apply` without `strategy.run`: the error it raises."""
    with kh.HybridStrategy(
        timeout_seconds=60, variable_kinds=models.SPARSE_TABLES
    ) as strategy:
        x = np.arange(48 * 4, dtype="int32").reshape(48, 4) % 64
        y = np.arange(48, dtype="int32") % 3
        with strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input((4,), dtype="int32"),
                    keras.layers.Embedding(64, 4),
                    keras.layers.Flatten(),
                    keras.layers.Dense(3),
                ]
            )
            optimizer = keras.optimizers.SGD(0.1)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(True)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)

        try:
            step(x, y)
            return {"error": ""}
        except RuntimeError as error:
            return {"error": str(error)}


class Candidates(keras.layers.Layer):
    """keras-rs' `BruteForceRetrieval` in small: no state until
    `set_candidates` adds it after `fit`; scoring before fails."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.candidates = None

    def build(self, input_shape):
        pass

    def set_candidates(self, table):
        self.candidates = keras.Variable(table, trainable=False, name="c")
        self.built = True

    def call(self, queries):
        if self.candidates is None:
            raise ValueError("no candidates yet")
        return keras.ops.argmax(
            queries @ keras.ops.transpose(self.candidates), 1
        )


class LateRetrieval(keras.Model):
    """keras-rs' basic retrieval example: the loss gathers the candidate
    table in `compute_loss`; inference scores all candidates, which exist
    only after `fit` (`update_candidates`)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.users = keras.layers.Embedding(64, 4, name="users")
        self.items = keras.layers.Embedding(48, 4, name="items")
        self.retrieval = Candidates(name="retrieval")

    def build(self, input_shape):
        self.users.build(input_shape)
        self.items.build(input_shape)

    def call(self, x, training=False):
        out = {"users": self.users(x)}
        if not training:
            out["top"] = self.retrieval(out["users"])
        return out

    def compute_loss(self, x, y, y_pred, sample_weight, training=True):
        scores = keras.ops.sum(y_pred["users"] * self.items(y["item"]), 1)
        return keras.losses.mean_squared_error(y["rating"], scores)


def retrieval_data():
    rng = np.random.default_rng(5)
    users = rng.integers(0, 64, 96).astype("int32")
    items = (users * 5 % 48).astype("int32")
    rating = rng.uniform(0, 1, 96).astype("float32")
    return users, {"item": items, "rating": rating}


def fit_retrieval(strategy=None) -> dict:
    """`LateRetrieval` trained, its candidates set from the item table
    (read whole, eagerly), then the top candidate of 8 users."""
    users, y = retrieval_data()
    keras.utils.set_random_seed(11)
    scope = strategy.scope() if strategy else tf.init_scope()
    with scope:
        model = LateRetrieval()
        model.compile(optimizer=keras.optimizers.SGD(0.5))
    history = model.fit(
        users, y, batch_size=24, epochs=2, shuffle=False, verbose=0
    )
    model.retrieval.set_candidates(model.items.embeddings)
    top = model.predict(users[:8], batch_size=8, verbose=0)["top"]
    return {
        "loss": history.history["loss"],
        "top": np.asarray(top).tolist(),
        "items": model.items.embeddings.numpy(),
    }


def late_retrieval() -> dict:
    with kh.HybridStrategy(variable_kinds=models.SPARSE_TABLES) as strategy:
        return fit_retrieval(strategy)
