# Two entry points (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-onnx lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/quickstart.py

# The second pytest run repeats every test that uses "ipu_model" on PopXL's 4-tile IPU
# model: the IPU model must not report out-of-memory for any of them.
IPU_MODEL_TESTS = $(shell grep -l '"ipu_model"\|ipu_model_report' tests/test_*.py)

test: $(STAMP)
	$(PY) -m ruff check ipuxl tests benchmarks examples
	$(PY) -m pytest
	IPUXL_IPU_MODEL_TILES=4 $(PY) -m pytest -q $(IPU_MODEL_TESTS)

# ONNX's own backend test suite against ipuxl.onnx.backend; rewrites docs/onnx_support.md
# and fails unless >= 90 % of the node tests and every bundled real model pass.
test-onnx: $(STAMP)
	$(PY) tests/onnx_backend/run_suite.py

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[test,bench]"
	$(PY) benchmarks/session_overhead.py
	$(PY) benchmarks/training.py
	$(PY) benchmarks/replication.py
	$(PY) benchmarks/simulator.py
	$(PY) benchmarks/jit.py
	$(PY) benchmarks/compile_cache.py
	$(PY) benchmarks/runtime.py

clean:
	rm -rf $(VENV) build *.egg-info
