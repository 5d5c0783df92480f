"""The keys a `DynamicEmbedding` takes: their dtype, and clear errors for
what it cannot take."""

import numpy as np
import tensorflow as tf


def key_dtype(dtype) -> str:
    name = tf.as_dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name == "string":
        return "string"
    if tf.as_dtype(name).is_integer:
        return "int64"
    raise TypeError(
        "DynamicEmbedding takes integer or string keys. Received: keys of "
        f"dtype {name}. Cast them to int64, or use strings."
    )


def check_keys(inputs) -> None:
    if (
        isinstance(inputs, (tf.RaggedTensor, tf.SparseTensor))
        or getattr(inputs, "ragged", False)
        or getattr(inputs, "sparse", False)
    ):
        raise TypeError(
            "DynamicEmbedding takes dense keys. Received: a "
            f"{type(inputs).__name__}. Pad the keys to a dense tensor "
            "(e.g. `ragged.to_tensor(default_value=0)` with mask_zero=True)."
        )
    key_dtype(inputs.dtype)


def as_keys(inputs, key_dtype: str) -> tf.Tensor:
    inputs = tf.convert_to_tensor(inputs)
    if (inputs.dtype == tf.string) != (key_dtype == "string"):
        raise TypeError(
            f"This DynamicEmbedding was built for {key_dtype} keys. "
            f"Received: keys of dtype {inputs.dtype.name}."
        )
    return inputs if key_dtype == "string" else tf.cast(inputs, tf.int64)


def default_row(default_value, output_dim: int) -> np.ndarray:
    if default_value is None:
        return np.zeros([output_dim], np.float32)
    row = np.broadcast_to(np.asarray(default_value, np.float32), [output_dim])
    return np.array(row)
