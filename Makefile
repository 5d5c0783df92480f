# Two commands do all the set-up on a fresh machine with Python 3.11 + pip:
#   make demo   - 3-worker training on localhost through keras-hybrid-run
#   make test   - the test suite
# Each creates .venv on first use and installs the package into it.
# make test-horovod runs the engine-parametrized tests on the Horovod engine
# in its own .venv-hvd (TF 2.15.1, Keras 3.15, Horovod 0.28.1 with Gloo).
# make test-matrix runs tests/compat (the private-hook tests and a 2-worker
# smoke test) in one .venv-tf<version> per TF version of MATRIX_TF.

PYTHON ?= python3
VENV ?= .venv
TF_PACKAGE ?= tensorflow-cpu==2.21.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The Horovod environment: Horovod 0.28.1 builds only against TF 2.15.1.
HVD_VENV ?= .venv-hvd
HVD_PY := $(HVD_VENV)/bin/python
HVD_STAMP := $(HVD_VENV)/.installed
# Built wheels are kept per TF version: a wheel built against another TF
# fails to load its ops.
HVD_WHEELS ?= $(HOME)/.cache/keras-hybrid/wheels/tf-2.15.1
HOROVOD_BUILD_ENV := HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 \
	HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1

# The TF version matrix. TF 2.21 (.venv) and TF 2.15.1 (.venv-hvd) run
# tests/compat in `make test` and `make test-horovod`; these are the others.
MATRIX_TF ?= 2.16.2 2.19.1
# Every wheel an environment needs is downloaded once per TF version; a
# rebuilt environment then installs offline from there.
MATRIX_WHEELS ?= $(HOME)/.cache/keras-hybrid/wheels
MATRIX_REQS := "keras==3.15.*" pytest pytest-timeout setuptools wheel
MATRIX_STAMPS := $(foreach v,$(MATRIX_TF),.venv-tf$(v)/.installed)

.PHONY: demo test soak test-horovod test-matrix horovod-wheel lint clean \
	bench-scaled test-id-sources

$(STAMP): setup.cfg setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TF_PACKAGE)" -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/keras-hybrid-run -np 3 $(PY) examples/quickstart/main.py --epochs=5

# The suite runs on TEST_PROCS pytest-xdist processes (tests/conftest.py
# groups them): one runs the tests that run scenarios on the shared pools
# of workers, another those that launch their own processes, and the
# one-process test files go to whichever is free. On 2 cores: 23-35 min
# (docs/architecture.md, "Tests"); TEST_PROCS=0 runs it in this process.
TEST_PROCS ?= 2
XDIST_ARGS := $(if $(filter-out 0,$(TEST_PROCS)),-n $(TEST_PROCS) --dist loadgroup)

test: $(STAMP)
	$(PY) -m pytest -q $(XDIST_ARGS)

# Every id source x model shape on 2, 3 and 4 workers on every exchange
# path (the default suite runs a short version of this matrix).
test-id-sources: $(STAMP)
	KERAS_HYBRID_ID_MATRIX=full $(PY) -m pytest -q \
		tests/sparse/test_id_sources_multiprocess.py

# The fault-injection soak: 30 random elastic jobs (2-4 workers, a
# partitioned table, Adam), each SIGKILLing one or two workers at a random
# moment, judged against the uninterrupted run (docs/elastic.md).
SOAK_RUNS ?= 30
SOAK_SEED ?= 1
soak: $(STAMP)
	$(PY) -m keras_hybrid.testing.soak --runs=$(SOAK_RUNS) \
		--seed=$(SOAK_SEED) --out=soak.json

# Keras 3.15 goes in after TF 2.15.1, which pulls Keras 2.15.
$(HVD_STAMP): setup.cfg setup.py pyproject.toml
	$(PYTHON) -m venv $(HVD_VENV)
	$(HVD_PY) -m pip install --quiet --upgrade pip
	$(HVD_PY) -m pip install --quiet "tensorflow-cpu==2.15.1"
	$(HVD_PY) -m pip install --quiet "keras==3.15.*"
	$(MAKE) --no-print-directory horovod-wheel
	$(HVD_PY) -m pip install --quiet $(HVD_WHEELS)/horovod-0.28.1-*.whl
	$(HVD_PY) -m pip install --quiet -e ".[test]"
	touch $(HVD_STAMP)

# Reuses a wheel from $(HVD_WHEELS) or pip's cache; else builds it (about
# 6 minutes on 2 cores, 10 on a loaded machine; pip shows its progress).
# CMake 4 refuses Gloo's `cmake_minimum_required` (< 3.5), hence cmake<4.
horovod-wheel:
	@mkdir -p $(HVD_WHEELS)
	@if ls $(HVD_WHEELS)/horovod-0.28.1-*.whl >/dev/null 2>&1; then \
		echo "horovod: reusing $$(ls $(HVD_WHEELS)/horovod-0.28.1-*.whl)"; \
	elif cached=$$(find "$$($(HVD_PY) -m pip cache dir)" \
			-name 'horovod-0.28.1-*.whl' 2>/dev/null | head -n 1) \
			&& [ -n "$$cached" ]; then \
		echo "horovod: reusing $$cached from pip's cache"; \
		cp "$$cached" $(HVD_WHEELS)/; \
	else \
		echo "horovod: building 0.28.1 against TF 2.15.1 (minutes)"; \
		$(HVD_PY) -m pip install --quiet "cmake<4" && \
		PATH="$(abspath $(HVD_VENV))/bin:$$PATH" $(HOROVOD_BUILD_ENV) \
			$(HVD_PY) -m pip wheel --no-build-isolation \
			--no-deps -w $(HVD_WHEELS) horovod==0.28.1; \
	fi

test-horovod: $(HVD_STAMP)
	KERAS_HYBRID_TEST_ENGINES=horovod $(HVD_PY) -m pytest -q -k horovod \
		tests/comm tests/sparse tests/strategy tests/patches tests/horovod \
		tests/dynamic
	$(HVD_PY) -m pytest -q tests/compat

# Keras 3.15 resolves beside TF >= 2.16 in one install. The package goes
# in without its dependencies: the matrix needs TF, Keras and pytest only.
# --no-compile: byte-compiling all of TF took half the install's CPU time;
# Python compiles what the tests import.
.venv-tf%/.installed: setup.cfg setup.py pyproject.toml
	rm -rf .venv-tf$*
	$(PYTHON) -m venv .venv-tf$*
	@if [ ! -f $(MATRIX_WHEELS)/tf-$*/.complete ]; then \
		echo "tf $*: downloading wheels to $(MATRIX_WHEELS)/tf-$*"; \
		.venv-tf$*/bin/python -m pip download --quiet \
			-d $(MATRIX_WHEELS)/tf-$* "tensorflow-cpu==$*" \
			$(MATRIX_REQS) && touch $(MATRIX_WHEELS)/tf-$*/.complete; \
	fi
	.venv-tf$*/bin/python -m pip install --quiet --no-compile --no-index \
		--find-links $(MATRIX_WHEELS)/tf-$* "tensorflow-cpu==$*" $(MATRIX_REQS)
	.venv-tf$*/bin/python -m pip install --quiet --no-index --no-deps \
		--no-build-isolation -e .
	touch $@

# Every version runs, then the target fails if any did.
test-matrix: $(MATRIX_STAMPS)
	@failed=""; for v in $(MATRIX_TF); do \
		echo "== TF $$v: tests/compat"; start=$$(date +%s); \
		.venv-tf$$v/bin/python -m pytest -q tests/compat \
			|| failed="$$failed $$v"; \
		echo "== TF $$v: $$(( $$(date +%s) - start )) s"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-matrix failed on TF$$failed"; \
		exit 1; fi

# Network-scaled benchmark (root): hybrid, allgather and dense at 4 workers
# (one namespace each, 3 runs per mode) and 8 workers (8 emulated hosts
# with sshd, over ssh, 1 run per mode), the links scaled so that
# communication takes the share of a step it takes on TARGET_STEP_MS
# accelerators with TARGET_BANDWIDTH links (docs/benchmarks.md). About
# 20 + 25 minutes on a busy 2-core machine. TBF_QUEUE_MS sizes each link's
# queue (400 for the 1 Gbit/s target: docs/benchmarks.md says why).
TARGET_STEP_MS ?= 2
TARGET_BANDWIDTH ?= 10gbit
TBF_QUEUE_MS ?= 50
BENCH_OUT ?= bench
SCALED := --workload=lm --vocab=20000 --target_step_ms=$(TARGET_STEP_MS) \
	--target_bandwidth=$(TARGET_BANDWIDTH) --tbf_queue_ms=$(TBF_QUEUE_MS)
bench-scaled: $(STAMP)
	@mkdir -p $(BENCH_OUT)
	$(PY) -m keras_hybrid.benchmark $(SCALED) --workers=4 --steps=15 \
		--warmup_steps=3 --repeats=3 --output_json=$(BENCH_OUT)/lm4.json
	$(PY) -m keras_hybrid.benchmark $(SCALED) --workers=8 \
		--emulated_hosts=8 --steps=10 --warmup_steps=2 --repeats=1 \
		--output_json=$(BENCH_OUT)/lm8.json

lint: $(STAMP)
	$(VENV)/bin/ruff check keras_hybrid tests examples
	$(VENV)/bin/ruff format --check keras_hybrid tests examples

clean:
	rm -rf $(VENV) $(HVD_VENV) .venv-tf* build *.egg-info
