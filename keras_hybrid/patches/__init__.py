"""Every runtime patch of Keras and TensorFlow objects, in one registry.

Each module here declares its patch sites as data (target, attribute,
replacement); `registry` installs them while a multi-worker
`HybridStrategy` is in use and restores them in reverse order when the
last one closes.
"""
