# Two commands do all the set-up on a fresh machine with Python 3.11 + pip:
#   make demo   - 2-worker training on localhost through keras-hybrid-run
#   make test   - the test suite
# Each creates .venv on first use and installs the package into it.

PYTHON ?= python3
VENV ?= .venv
TF_PACKAGE ?= tensorflow-cpu==2.21.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): setup.cfg setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TF_PACKAGE)" -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/keras-hybrid-run -np 2 $(PY) examples/quickstart/main.py --epochs=5

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check keras_hybrid tests examples
	$(VENV)/bin/ruff format --check keras_hybrid tests examples

clean:
	rm -rf $(VENV) build *.egg-info
