# Two entry points (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/quickstart.py

test: $(STAMP)
	$(PY) -m ruff check ipuxl tests benchmarks examples
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/session_overhead.py
	$(PY) benchmarks/training.py
	$(PY) benchmarks/replication.py

clean:
	rm -rf $(VENV) build *.egg-info
