"""Small helpers the example scripts share: flags, callbacks, Zipf ids."""
