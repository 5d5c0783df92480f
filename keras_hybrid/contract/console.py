"""Variables the launcher sets for a worker's console output, read by the
library in the worker."""

# TensorFlow's C++ log threshold: 1 hides its INFO banners (oneDNN, CPU
# features, server start) and keeps warnings and errors.
TF_LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
QUIET_TF_LOG_LEVEL = "1"
# The library's log level: debug, info (the default), warning or error.
LOG_LEVEL_ENV = "KERAS_HYBRID_LOG_LEVEL"
LOG_LEVELS = ("debug", "info", "warning", "error")
# "1" when the launcher's console is a terminal, "0" when it is not: rank
# 0 then draws Keras' progress bar in place, or writes one line per epoch.
CONSOLE_TERMINAL_ENV = "KERAS_HYBRID_CONSOLE_TERMINAL"
