"""Small models and data with which tests compare N workers to one."""

import keras
import numpy as np

MODEL_KINDS = ("sequential", "functional", "subclassed")
# `variable_kinds` for tests of the partitioned path itself: their small
# tables would otherwise stay dense by the cost rule.
SPARSE_TABLES = {".*embeddings": "sparse"}


class SubclassedMLP(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(16, activation="tanh")
        self.out = keras.layers.Dense(3)

    def call(self, inputs):
        return self.out(self.hidden(inputs))


def build_model(kind: str, seed: int) -> keras.Model:
    """A 8 -> 16 -> 3 MLP built three ways; weights depend on `seed`."""
    keras.utils.set_random_seed(seed)
    if kind == "sequential":
        model = keras.Sequential(
            [
                keras.Input((8,)),
                keras.layers.Dense(16, activation="tanh"),
                keras.layers.Dense(3),
            ]
        )
    elif kind == "functional":
        inputs = keras.Input((8,))
        hidden = keras.layers.Dense(16, activation="tanh")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(3)(hidden))
    elif kind == "subclassed":
        model = SubclassedMLP()
        model(np.zeros((1, 8), "float32"))  # creates the weights
    else:
        raise ValueError(
            f"`kind` must be one of {MODEL_KINDS}. Received: kind={kind!r}"
        )
    return model


def make_data(num_samples: int = 256, seed: int = 0):
    """Inputs (n, 8) and 3-class labels from a fixed linear rule."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_samples, 8)).astype("float32")
    w = rng.normal(size=(8, 3)).astype("float32")
    y = np.argmax(x @ w + 0.1 * rng.normal(size=(num_samples, 3)), axis=1)
    return x, y.astype("int32")


def make_optimizer(name: str, **kwargs) -> keras.optimizers.Optimizer:
    """SGD with momentum or Adam; `kwargs` go to the optimizer."""
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=0.1, momentum=0.5, **kwargs)
    if name == "adam":
        return keras.optimizers.Adam(learning_rate=0.01, **kwargs)
    raise ValueError(f"Unknown optimizer {name!r}; use 'sgd' or 'adam'.")


def compile_model(
    model: keras.Model, optimizer: str, steps_per_execution: int = 1, **kwargs
) -> None:
    """Compiles with a classification loss and accuracy; `kwargs` go to
    the optimizer."""
    model.compile(
        optimizer=make_optimizer(optimizer, **kwargs),
        steps_per_execution=steps_per_execution,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["sparse_categorical_accuracy"],
    )
