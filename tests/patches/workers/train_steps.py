"""Models whose `train_step` computes and applies its own gradients, as
keras-io writes them for one device, and their data.

Every random draw of the originals (the VAE's noise, the GAN's latent
vectors) is an input here, so that N workers and one process see the same
numbers and can be compared exactly. Everything runs in float64.
"""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

CASES = (
    "vae",
    "gan",
    "gan_keras_losses",
    "gan_global_sums",
    "gan_table",
    "mirrored",
    "own_rows",
    "summed",
    "table",
    "read_after_update",
    "raw_logs",
    "guide",
    "clipnorm",
    "global_clipnorm",
    "clipvalue",
    "clipnorm_table",
    "global_clipnorm_table",
)
# Stock `fit` with an optimizer that clips: a replicated table ("rows": its
# gradient rows, with repeated ids) and dense layers. Each bound bites.
CLIPPING = {"clipnorm": 0.05, "global_clipnorm": 0.08, "clipvalue": 0.004}
# The same by norm with the table partitioned ("table"): its norm is summed
# over the owners. Each global batch looks up distinct ids, where one
# process's norm over lookup rows equals the norm over ids.
CLIPPING_TABLE = {"clipnorm_table": 0.05, "global_clipnorm_table": 0.08}
GAN_LOSSES = {
    "gan": "mean",
    "gan_keras_losses": "keras",
    "gan_global_sums": "global_sums",
}
BATCH = 16
STEPS = 6
FEATURES = 6
LATENT = 3
VOCAB = 40
TABLE_ROWS = 4 * BATCH * STEPS + 16  # every id of a run distinct


def data(case: str):
    """`(x, y)` arrays of STEPS global batches for `case`."""
    rng = np.random.default_rng(3)
    n = BATCH * STEPS
    tables = ("table", "gan_table", "read_after_update", "raw_logs")
    if case in tables or case in CLIPPING:
        ids = rng.integers(0, VOCAB, size=(n, 4)).astype("int32")
        return ids, rng.normal(size=(n, 1))
    if case in CLIPPING_TABLE:
        ids = rng.permutation(TABLE_ROWS)[: n * 4].reshape(n, 4)
        return ids.astype("int32"), rng.normal(size=(n, 1))
    if case == "summed":
        x = rng.normal(size=(n, FEATURES))
        return x, rng.integers(0, 5, size=(n,)).astype("int32")
    if case == "guide":
        return rng.normal(size=(n, FEATURES)), rng.normal(size=(n, 1))
    x = rng.normal(size=(n, FEATURES))
    noise = rng.normal(size=(n, LATENT))
    return (x, noise), np.zeros((n, 1))


class VAE(keras.Model):
    """keras-io's VAE step: `reconstruction + kl`, both means over rows."""

    def __init__(self):
        super().__init__()
        self.encoder = keras.layers.Dense(2 * LATENT, name="encoder")
        self.decoder = keras.layers.Dense(FEATURES, name="decoder")

    def call(self, inputs):
        x, noise = inputs
        stats = self.encoder(x)
        mean, log_var = stats[:, :LATENT], stats[:, LATENT:]
        z = mean + ops.exp(0.5 * log_var) * noise
        return self.decoder(z), mean, log_var

    def train_step(self, data):
        (x, noise), _ = data
        with tf.GradientTape() as tape:
            recon, mean, log_var = self((x, noise))
            reconstruction = ops.mean(ops.sum(ops.square(x - recon), axis=1))
            kl = -0.5 * (1 + log_var - ops.square(mean) - ops.exp(log_var))
            kl = ops.mean(ops.sum(kl, axis=1))
            loss = reconstruction + kl
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(
            zip(grads, self.trainable_weights, strict=True)
        )
        return {"loss": loss}


class GAN(keras.Model):
    """keras-io's DCGAN step: two optimizers, two tapes. The losses are
    `"mean"`: hand-written means; `"keras"`: `BinaryCrossentropy` (scaled
    for distribution by Keras); `"global_sums"`: per-example losses summed
    and divided by the global batch size, a constant (the idiom of TF's
    custom-loop tutorials), the generator's as a product with its inverse.
    It logs each loss's mean, as keras-io's step does.
    """

    def __init__(self, losses: str):
        super().__init__()
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")
        self.generator = keras.layers.Dense(FEATURES, name="generator")
        self.discriminator = keras.layers.Dense(1, name="discriminator")
        self.losses_of = losses
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)

    def call(self, inputs):
        x, noise = inputs
        return self.discriminator(x), self.generator(noise)

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer

    def _loss(self, labels, logits, generator=False):
        if self.losses_of == "keras":
            return self.bce(labels, logits)
        per_example = (
            ops.maximum(logits, 0)
            - logits * labels
            + ops.log(1 + ops.exp(-ops.abs(logits)))
        )
        if self.losses_of == "mean":
            return ops.mean(per_example)
        if generator:
            return ops.sum(per_example) * (1.0 / BATCH)
        return ops.sum(per_example) / BATCH

    def train_step(self, data):
        (real, noise), _ = data
        rows = ops.shape(real)[0]
        fake = self.generator(noise)
        both = ops.concatenate([fake, real], axis=0)
        labels = ops.concatenate(
            [ops.ones((rows, 1), "float64"), ops.zeros((rows, 1), "float64")]
        )
        with tf.GradientTape() as tape:
            d_loss = self._loss(labels, self.discriminator(both))
        d_weights = self.discriminator.trainable_weights
        grads = tape.gradient(d_loss, d_weights)
        self.d_optimizer.apply_gradients(zip(grads, d_weights, strict=True))
        with tf.GradientTape() as tape:
            logits = self.discriminator(self.generator(noise))
            g_loss = self._loss(
                ops.zeros((rows, 1), "float64"), logits, generator=True
            )
        g_weights = self.generator.trainable_weights
        grads = tape.gradient(g_loss, g_weights)
        self.g_optimizer.apply_gradients(zip(grads, g_weights, strict=True))
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {m.name: m.result() for m in self.metrics}

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]


class TableGAN(keras.Model):
    """A GAN's step on a partitioned table: its first lookup (the
    generator's fakes) runs before either tape, then each tape reads the
    table again and each of two optimizers updates it."""

    def __init__(self):
        super().__init__()
        self.table = keras.layers.Embedding(VOCAB, 3, name="table")
        self.generator = keras.layers.Dense(3, name="generator")
        self.discriminator = keras.layers.Dense(1, name="discriminator")

    def _pooled(self, ids):
        return ops.mean(self.table(ids), axis=1)

    def call(self, ids):
        return self.discriminator(self.generator(self._pooled(ids)))

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer

    def train_step(self, data):
        ids, y = data
        fake = self.generator(self._pooled(ids))
        d_weights = self.discriminator.trainable_weights + [
            self.table.embeddings
        ]
        with tf.GradientTape() as tape:
            real = self.discriminator(self._pooled(ids))
            d_loss = ops.mean(ops.square(real - y)) + ops.mean(
                ops.square(self.discriminator(fake))
            )
        grads = tape.gradient(d_loss, d_weights)
        self.d_optimizer.apply_gradients(zip(grads, d_weights, strict=True))
        g_weights = self.generator.trainable_weights + [self.table.embeddings]
        with tf.GradientTape() as tape:
            fake = self.generator(self._pooled(ids))
            g_loss = ops.mean(ops.square(self.discriminator(fake) - 1.0))
        grads = tape.gradient(g_loss, g_weights)
        self.g_optimizer.apply_gradients(zip(grads, g_weights, strict=True))
        return {"d_loss": d_loss, "g_loss": g_loss}


class Mirrored(keras.Model):
    """A step written for `MirroredStrategy`: per-example losses averaged
    over the global batch with `tf.nn.compute_average_loss`."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1, name="dense")

    def call(self, inputs):
        return self.dense(inputs[0])

    def train_step(self, data):
        (x, noise), _ = data
        with tf.GradientTape() as tape:
            per_example = ops.sum(ops.square(self((x, noise)) - 1.0), axis=1)
            loss = tf.nn.compute_average_loss(
                per_example, global_batch_size=BATCH
            )
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(
            zip(grads, self.trainable_weights, strict=True)
        )
        return {"loss": loss}


class OwnRows(Mirrored):
    """A mean written as a sum over the rows divided by their static
    count: on N workers the count is this worker's rows, a constant of the
    traced step, so the loss is a mean, not a sum."""

    def train_step(self, data):
        (x, noise), _ = data
        with tf.GradientTape() as tape:
            per_example = ops.sum(ops.square(self((x, noise)) - 1.0), axis=1)
            loss = ops.sum(per_example) / per_example.shape[0]
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(
            zip(grads, self.trainable_weights, strict=True)
        )
        return {"loss": loss}


class Summed(keras.Model):
    """keras-io's masked-LM step: `reduction=None`, so the target is the
    vector of per-token losses, which `tape.gradient` sums."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(5, name="dense")
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None
        )

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, self(x))
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(
            zip(grads, self.trainable_weights, strict=True)
        )
        return {"loss": ops.mean(loss)}


class TableStep(keras.Model):
    """A table and a head; a hand-written mean loss and `apply_gradients`
    on the table itself."""

    def __init__(self):
        super().__init__()
        self.table = keras.layers.Embedding(VOCAB, 3, name="table")
        self.head = keras.layers.Dense(1, name="head")

    def call(self, ids):
        return self.head(ops.mean(self.table(ids), axis=1))

    def train_step(self, data):
        ids, y = data
        with tf.GradientTape() as tape:
            loss = ops.mean(ops.square(self(ids) - y))
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(
            zip(grads, self.trainable_weights, strict=True)
        )
        return {"loss": loss}


class RawLogs(TableStep):
    """Returns tensors of its own, not metrics' results, as TF's custom
    steps do: its mean loss as `"loss"` (the name of Keras' loss tracker,
    which it never updates), its part of the global batch's mean
    (`compute_average_loss`), its sum of squared errors, and the global
    batch's rows (all-reduced by the replica context)."""

    def train_step(self, data):
        ids, y = data
        with tf.GradientTape() as tape:
            errors = ops.square(self(ids) - y)[:, 0]
            loss = ops.mean(errors)
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(
            zip(grads, self.trainable_weights, strict=True)
        )
        rows = tf.distribute.get_replica_context().all_reduce(
            "sum", tf.cast(tf.shape(ids)[0], errors.dtype)
        )
        return {
            "loss": loss,
            "part": tf.nn.compute_average_loss(errors, global_batch_size=BATCH),
            "sum": ops.sum(errors),
            "rows": rows,
        }


class ReadAfterUpdate(TableStep):
    """After its update, the step reads the table again and logs the loss
    of the updated model (one process reads the updated rows)."""

    def __init__(self):
        super().__init__()
        self.after = keras.metrics.Mean(name="after")

    def train_step(self, data):
        super().train_step(data)
        ids, y = data
        self.after.update_state(ops.mean(ops.square(self(ids) - y)))
        return {"after": self.after.result()}

    @property
    def metrics(self):
        return [self.after]


class Guide(keras.Model):
    """Keras' guide "Customizing what happens in fit()": the compiled loss
    from `compute_loss`, then every metric updated, the loss tracker with
    that loss (scaled for distribution under a strategy)."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1, name="dense")

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(
            zip(grads, self.trainable_variables, strict=True)
        )
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def build(case: str) -> keras.Model:
    """The compiled model of `case`, built, with fixed initial weights."""
    keras.utils.set_random_seed(11)
    if case == "vae":
        model = VAE()
    elif case == "gan_table":
        model = TableGAN()
    elif case.startswith("gan"):
        model = GAN(losses=GAN_LOSSES[case])
    elif case == "mirrored":
        model = Mirrored()
    elif case == "own_rows":
        model = OwnRows()
    elif case == "summed":
        model = Summed()
    elif case == "table":
        model = TableStep()
    elif case == "read_after_update":
        model = ReadAfterUpdate()
    elif case == "raw_logs":
        model = RawLogs()
    elif case == "guide":
        model = Guide()
    elif case in CLIPPING_TABLE:
        model = _embedding_regressor(TABLE_ROWS, "table")
    elif case in CLIPPING:
        model = _embedding_regressor(VOCAB, "rows")
    else:
        raise ValueError(f"Unknown case {case!r}; one of {CASES}.")
    x, _ = data(case)
    first = tf.nest.map_structure(lambda a: a[:2], x)
    model(first)
    if case.startswith("gan"):
        model.compile(
            d_optimizer=keras.optimizers.SGD(0.1),
            g_optimizer=keras.optimizers.SGD(0.1),
        )
    elif case == "guide":
        model.compile(
            optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"]
        )
    elif case in CLIPPING:
        clip = {case: CLIPPING[case]}
        model.compile(optimizer=keras.optimizers.SGD(0.5, **clip), loss="mse")
    elif case in CLIPPING_TABLE:
        clip = {case.removesuffix("_table"): CLIPPING_TABLE[case]}
        model.compile(optimizer=keras.optimizers.SGD(0.5, **clip), loss="mse")
    else:
        model.compile(optimizer=keras.optimizers.SGD(0.1))
    return model


def _embedding_regressor(rows: int, table: str):
    return keras.Sequential(
        [
            keras.layers.Embedding(rows, 3, name=table),
            keras.layers.Flatten(),
            keras.layers.Dense(4, activation="tanh", name="hidden"),
            keras.layers.Dense(1, name="head"),
        ]
    )


def train(model, case: str) -> tuple[list, dict]:
    """Trains `model` on the STEPS global batches of `case`, in order;
    returns its weights and its logs (`History.history`)."""
    x, y = data(case)
    history = model.fit(
        x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0
    )
    return model.get_weights(), history.history
