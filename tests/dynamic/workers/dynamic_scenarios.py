"""Pool scenarios of `DynamicEmbedding` under `HybridStrategy`.

`train` fits every [optimizer, admit_after] config of `dynamic_cases`
(those with `admit_after` > 1 on a subclassed model, which `fit` builds)
and returns, per config, this rank's live keys and their rows, the
head's weights before and after, the losses and the (global)
predictions. Ranks seed differently on purpose: dense weights are
broadcast from rank 0 and rows drawn from their keys, so every rank and
worker count must start alike anyway.

`train_strings` fits string keys (`cases.make_string_data`), and saves
the model when given a path.

`masked_strings` fits string keys padded with `""` through a layer with
`mask_zero` and a masked average, and returns its masks and predictions
next to those of its stock copy (`to_static`).

`refusals` returns the messages of what the layer refuses on several
workers.

`row_constraint` fits a table whose constraint maps each row by itself
(`UnitNorm(axis=1)`) and returns the losses, the predictions and the
norms of this rank's live rows.
"""

import dataclasses

import dynamic_cases as cases  # noqa: I001  (sits beside this module)
import keras
import numpy as np
import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.layers import to_static


def train(configs: list, timeout: float = 60) -> dict:
    keys, targets = cases.make_data()
    with kh.HybridStrategy(timeout_seconds=timeout) as strategy:
        results = {
            "size": strategy.size,
            "rank": strategy.rank,
            "engine": strategy.engine,
        }
        for optimizer, admit_after in configs:
            results[cases.key(optimizer, admit_after)] = train_one(
                strategy, optimizer, admit_after, keys, targets
            )
        return results


def train_one(strategy, optimizer, admit_after, keys, targets) -> dict:
    keras.utils.set_random_seed(cases.SEED + 1000 * strategy.rank)
    with strategy.scope():
        model, layer = cases.build_model(
            admit_after, subclassed=admit_after > 1
        )
        model.compile(
            optimizer=cases.make_optimizer(optimizer, wrap=True), loss="mse"
        )
    head = model.get_layer("head")
    initial_head = []
    # At `fit`'s start: a subclassed model is built by then.
    record_head = keras.callbacks.LambdaCallback(
        on_train_begin=lambda logs: initial_head.extend(head.get_weights())
    )
    before = strategy.communicator.stats.snapshot()
    history = model.fit(
        keys,
        targets,
        # Its epoch logs hold `DynamicTableStats`' figures too.
        callbacks=[record_head, kh.callbacks.CommunicationStats()],
        **cases.FIT,
    )
    moved = strategy.communicator.stats.delta(before)
    live_keys, live_rows = layer.live_keys()
    owners = layer.key_owners.owner_of(tf.constant(live_keys, tf.int64))
    return {
        "initial_head": initial_head,
        "final_head": head.get_weights(),
        "loss": history.history["loss"],
        "history": history.history,
        "keys": live_keys,
        "rows": layer.embeddings.numpy()[live_rows],
        "owners": owners.numpy(),
        "table_shape": tuple(layer.embeddings.shape),
        "table_path": layer.embeddings.path,
        "plan": str(strategy.plan),
        "plan_entry": dataclasses.asdict(strategy.plan[layer.embeddings.path]),
        "stats": layer.stats(),
        "worker_stats": layer.worker_stats(),
        "slot_shapes": [
            tuple(v.shape)
            for v in model.optimizer.variables
            # `adam/dyn_embeddings_momentum`, or with the model's name.
            if layer.embeddings.path.replace("/", "_") + "_" in v.path
        ],
        "predict": model.predict(keys, batch_size=cases.BATCH, verbose=0),
        "calls": {
            p: moved[p]["calls"] for p in ("ids", "sparse_pull", "sparse_push")
        },
        "bytes": {
            p: int(moved[p]["bytes"])
            for p in ("control", "ids", "sparse_pull", "sparse_push", "padding")
        },
        "pulled_bytes": int(moved["sparse_pull"]["received_bytes"]),
    }


def train_strings(
    configs: list, path: str | None = None, timeout: float = 60
) -> dict:
    """Per [optimizer, admit_after] config: the initial and final head,
    losses, live keys and rows, predictions, and the rows of every key
    read by the layer and by its `static_equivalent()`;
    the last config's model is saved to `path` (`model.save`), and on one
    worker its weights beside it (`.weights.h5`)."""
    keys, targets = cases.make_string_data()
    results = {}
    with kh.HybridStrategy(timeout_seconds=timeout) as strategy:
        for optimizer, admit_after in configs:
            keras.utils.set_random_seed(cases.SEED + 1000 * strategy.rank)
            with strategy.scope():
                model, layer = cases.build_model(admit_after, "string")
                model.compile(
                    optimizer=cases.make_optimizer(optimizer), loss="mse"
                )
            head = model.get_layer("head")
            initial_head = head.get_weights()
            history = model.fit(
                cases.batches(keys, targets), epochs=cases.EPOCHS, verbose=0
            )
            stock = layer.static_equivalent()
            live_keys, live_rows = layer.live_keys()
            results[cases.key(optimizer, admit_after)] = {
                "initial_head": initial_head,
                "final_head": head.get_weights(),
                "loss": history.history["loss"],
                "keys": live_keys,
                "rows": layer.embeddings.numpy()[live_rows],
                "predict": model.predict(cases.batches(keys), verbose=0),
                "looked_up": layer(tf.constant(keys)).numpy(),
                "stock_looked_up": stock(tf.constant(keys)).numpy(),
            }
        if path:
            model.save(path)
            if strategy.size == 1:
                model.save_weights(path.replace(".keras", ".weights.h5"))
    return results


def masked_strings(timeout: float = 60) -> dict:
    keys, targets = cases.make_string_data()
    keys = keys.copy()
    keys[::2, -1] = b""  # padding: every other sample is one key short
    with kh.HybridStrategy(timeout_seconds=timeout) as strategy:
        keras.utils.set_random_seed(cases.SEED)
        with strategy.scope():
            inputs = keras.Input(shape=(cases.SEQ,), dtype="string")
            layer = DynamicEmbedding(
                cases.DIM, capacity=cases.CAPACITY, mask_zero=True, name="dyn"
            )
            x = keras.layers.GlobalAveragePooling1D()(layer(inputs))
            model = keras.Model(inputs, keras.layers.Dense(1, name="head")(x))
            model.compile(optimizer=cases.make_optimizer("adam"), loss="mse")
        history = model.fit(
            cases.batches(keys, targets), epochs=cases.EPOCHS, verbose=0
        )
        stock = to_static(model)
        # The stock lookup: string in, ids out, then the `Embedding`.
        ids = tf.constant(keys)
        for name in ("dyn_hashing", "dyn_lookup"):
            ids = stock.get_layer(name)(ids)
        return {
            "keys": keys,
            "loss": history.history["loss"],
            "live": layer.stats()["rows"],
            "mask": layer.compute_mask(tf.constant(keys)).numpy(),
            "stock_mask": stock.get_layer("dyn").compute_mask(ids).numpy(),
            "predict": model.predict(cases.batches(keys), verbose=0),
            "stock_predict": stock.predict(cases.batches(keys), verbose=0),
        }


def refusals(timeout: float = 60) -> dict:
    """`{case: error message}` of what several workers refuse, `fit`'s
    callbacks that save Keras weights files too."""
    out = {}
    with kh.HybridStrategy(timeout_seconds=timeout) as strategy:
        with strategy.scope():
            for name in ("regularizer", "constraint"):
                keys = keras.Input(shape=(2,), dtype="int64")
                argument = {
                    # Not a sum over rows.
                    "regularizer": {
                        "embeddings_regularizer": (
                            keras.regularizers.OrthogonalRegularizer(0.1)
                        )
                    },
                    # Over each column: it mixes rows.
                    "constraint": {"embeddings_constraint": "max_norm"},
                }[name]
                try:
                    kh.layers.DynamicEmbedding(4, capacity=8, **argument)(keys)
                except NotImplementedError as error:
                    out[name] = str(error)
            for name in ("Adafactor", "Lamb"):
                model, _ = cases.build_model(1)
                try:
                    model.compile(
                        optimizer=getattr(keras.optimizers, name)(),
                        loss="mse",
                    )
                except ValueError as error:
                    out[name] = str(error)
            model, _ = cases.build_model(1)
            try:
                model.compile(
                    optimizer=keras.optimizers.SGD(
                        gradient_accumulation_steps=2
                    ),
                    loss="mse",
                )
            except NotImplementedError as error:
                out["gradient_accumulation_steps"] = str(error)
            model, _ = cases.build_model(1)
            model.compile(optimizer="sgd", loss="mse")
        keys, targets = cases.make_data()
        for name, callback in (
            ("BackupAndRestore", keras.callbacks.BackupAndRestore("/nowhere")),
            (
                "save_weights_only",
                keras.callbacks.ModelCheckpoint(
                    "/nowhere/w.weights.h5", save_weights_only=True
                ),
            ),
        ):
            before = model.optimizer.iterations.numpy()
            try:
                model.fit(keys, targets, callbacks=[callback], verbose=0)
            except NotImplementedError as error:
                # Refused before the first step.
                trained = model.optimizer.iterations.numpy() - before
                out[name] = f"{error} (after {trained} steps)"
    return out


def _data(key_dtype: str) -> tuple:
    """`(fit arguments, predict input)` of `cases`' keys: NumPy integers,
    or string keys in a `tf.data` pipeline (Keras' NumPy adapter takes no
    strings)."""
    if key_dtype == "string":
        keys, targets = cases.make_string_data()
        return {"x": cases.batches(keys, targets)}, cases.batches(keys)
    keys, targets = cases.make_data()
    fit = {"x": keys, "y": targets, "batch_size": cases.BATCH}
    return {**fit, "shuffle": False}, keys


def save_first_epoch(
    optimizer: str,
    admit_after: int,
    directory: str,
    key_dtype: str = "int64",
    timeout: float = 60,
) -> dict:
    """Trains the first of `cases.EPOCHS` epochs and saves a sharded
    checkpoint of it in `directory`."""
    fit, _ = _data(key_dtype)
    with kh.HybridStrategy(timeout_seconds=timeout) as strategy:
        keras.utils.set_random_seed(cases.SEED + 1000 * strategy.rank)
        with strategy.scope():
            model, layer = cases.build_model(admit_after, key_dtype)
            model.compile(optimizer=cases.make_optimizer(optimizer), loss="mse")
        initial_head = model.get_layer("head").get_weights()
        history = model.fit(
            **fit,
            epochs=1,
            verbose=0,
            callbacks=[kh.callbacks.ShardedCheckpoint(directory)],
        )
        return {
            "initial_head": initial_head,
            "loss": history.history["loss"],
            "waiting": int(layer.table.counts.size()),
            "keys": layer.live_keys()[0],
        }


def resume(
    optimizer: str,
    admit_after: int,
    directory: str,
    key_dtype: str = "int64",
    timeout: float = 60,
) -> dict:
    """Restores the checkpoint in `directory` and trains the remaining
    epochs; returns what `train_one` returns (losses of those epochs)."""
    fit, predict_keys = _data(key_dtype)
    with kh.HybridStrategy(timeout_seconds=timeout) as strategy:
        # Other seeds than the saving run: everything must come from the
        # checkpoint.
        keras.utils.set_random_seed(cases.SEED + 77 + 1000 * strategy.rank)
        with strategy.scope():
            model, layer = cases.build_model(admit_after, key_dtype)
            model.compile(optimizer=cases.make_optimizer(optimizer), loss="mse")
        history = model.fit(
            **fit,
            epochs=cases.EPOCHS,
            verbose=0,
            callbacks=[
                kh.callbacks.ShardedCheckpoint(directory),
                kh.callbacks.DynamicTableStats(),
            ],
        )
        live_keys, live_rows = layer.live_keys()
        owners = layer.key_owners.owner_of(tf.constant(live_keys, tf.int64))
        return {
            "size": strategy.size,
            "loss": history.history["loss"],
            "history": history.history,
            "final_head": model.get_layer("head").get_weights(),
            "keys": live_keys,
            "rows": layer.embeddings.numpy()[live_rows],
            "owners": owners.numpy(),
            "stats": layer.stats(),
            "predict": model.predict(
                predict_keys, batch_size=cases.BATCH, verbose=0
            ),
        }


def save_stock(path: str, export: str, timeout: float = 60) -> dict:
    """Trains one config, saves it with `model.save(path)` and exports it
    to `export` (outside the scope); returns this rank's live keys and the
    predictions."""
    keys, targets = cases.make_data()
    with kh.HybridStrategy(timeout_seconds=timeout) as strategy:
        keras.utils.set_random_seed(cases.SEED + 1000 * strategy.rank)
        with strategy.scope():
            model, layer = cases.build_model(1)
            model.compile(optimizer=cases.make_optimizer("adam"), loss="mse")
        model.fit(
            keys, targets, batch_size=cases.BATCH, shuffle=False, verbose=0
        )
        model.save(path)
        model.export(export)
        return {
            "keys": layer.live_keys()[0],
            "predict": model.predict(keys, batch_size=cases.BATCH, verbose=0),
        }


# SGD(0.5) with a penalty summed over rows, gradient clipping by norm, or
# both: {name: (regularizer, optimizer options)}. Each bound bites.
WHOLE_TABLE_TERMS = {
    "penalty": (keras.regularizers.L1L2(0.01, 0.2), {}),
    "clipnorm": (None, {"clipnorm": 0.05}),
    "global_clipnorm": (None, {"global_clipnorm": 0.08}),
    "penalty_clipnorm": (keras.regularizers.L2(0.05), {"clipnorm": 0.05}),
    "unclipped": (None, {}),
}


def whole_table_terms(timeout: float = 60) -> dict:
    """Trains with each of `WHOLE_TABLE_TERMS`, whose penalty or norm
    covers every worker's rows; returns what each trained."""
    keys, targets = cases.make_data()
    out = {}
    for name, (regularizer, options) in WHOLE_TABLE_TERMS.items():
        with kh.HybridStrategy(timeout_seconds=timeout) as strategy:
            keras.utils.set_random_seed(cases.SEED)
            with strategy.scope():
                model, layer = cases.build_model(
                    1, embeddings_regularizer=regularizer
                )
                model.compile(
                    optimizer=keras.optimizers.SGD(0.5, **options),
                    loss="mse",
                )
            history = model.fit(keys, targets, **cases.FIT)
            live_keys, rows = layer.live_rows()
            order = np.argsort(live_keys)
            out[name] = {
                "loss": history.history["loss"],
                "predict": model.predict(
                    keys, batch_size=cases.BATCH, verbose=0
                ),
                "keys": live_keys[order],
                "rows": rows[order],
                "head": model.get_layer("head").get_weights(),
            }
    return out


def row_constraint(timeout: float = 60) -> dict:
    keys, targets = cases.make_data()
    with kh.HybridStrategy(timeout_seconds=timeout) as strategy:
        keras.utils.set_random_seed(cases.SEED)
        with strategy.scope():
            model, layer = cases.build_model(
                1, embeddings_constraint=keras.constraints.UnitNorm(axis=1)
            )
            model.compile(optimizer=cases.make_optimizer("adam"), loss="mse")
        history = model.fit(keys, targets, **cases.FIT)
        _, live_rows = layer.live_keys()
        rows = layer.embeddings.numpy()[live_rows]
        return {
            "loss": history.history["loss"],
            "predict": model.predict(keys, batch_size=cases.BATCH, verbose=0),
            "norms": (rows**2).sum(axis=1) ** 0.5,
        }
