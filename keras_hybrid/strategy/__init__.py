"""`HybridStrategy`: the `tf.distribute.Strategy` of keras-hybrid."""
