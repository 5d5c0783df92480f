"""`python -m keras_hybrid.run`: same as the `keras-hybrid-run` command."""

from keras_hybrid.launch.main import run

if __name__ == "__main__":
    run()
