# compgen: the two quick-start targets and their steps.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN ?= torch==2.13.0
OUT ?= outputs

.PHONY: setup quickstart test lint bench

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_PIN)
	$(PY) -m pip install --quiet -e ".[test]"

setup: $(PY)

quickstart: setup
	$(PY) -m compgen.quickstart --output-dir $(OUT)

test: setup
	$(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff check src tests examples dataset_scripts pipelines benchmarks

bench: setup
	$(PY) benchmarks/bench_renderer.py
