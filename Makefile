# compgen: the two quick-start targets and their steps.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel of PyTorch (PyPI's Linux wheel is the multi-GB CUDA build): from the package sources pip already
# knows (a local wheel cache), else from PyTorch's CPU index. On a GPU machine:
#   make setup TORCH_PIN=torch==2.13.0 TORCH_INDEX=<a CUDA index of download.pytorch.org>
TORCH_PIN ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
OUT ?= outputs

.PHONY: setup quickstart quickstart-maskgit test test-fast lint bench

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_PIN) 2>/dev/null || $(PY) -m pip install --quiet $(TORCH_PIN) --extra-index-url $(TORCH_INDEX)
	$(PY) -m pip install --quiet -e ".[test]"

setup: $(PY)

# The main job on a small CPU default: export the quick start's dataset with a contact sheet, then show Paper A's
# emergence on H32-train1 (sizes drawn as Paper A's text says, touching ranges) with the U-Net's quickstart preset and
# FiLM concept modulation (the README's five-minute command: results/paper-a-sizes/, the share of seeds it holds) into
# $(OUT)/unet, and print its per-level table by both scorers with where its plots and sample sheet are.
quickstart: setup
	$(PY) -m compgen.quickstart --output_dir $(OUT)
	OMP_NUM_THREADS=1 $(VENV)/bin/accelerate launch --cpu --num_processes 1 --num_cpu_threads_per_process 1 \
		examples/train_tuple_unet.py --preset quickstart --concept_modulation film --dataset okawa-h32-train1-sizes-touching \
		--output_dir $(OUT)/unet --resume_from_checkpoint latest
	$(PY) -m compgen.quickstart --report $(OUT)/unet

# Paper B's flagship, MaskGIT + JEPA (an all-classes tokenizer first), with its quickstart preset.
quickstart-maskgit: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/accelerate launch --cpu --num_processes 1 --num_cpu_threads_per_process 1 \
		examples/train_maskgit_jepa.py --preset quickstart --output_dir $(OUT)/maskgit-jepa --resume_from_checkpoint latest
	$(PY) -m compgen.quickstart --report $(OUT)/maskgit-jepa

# Tests run single-threaded, one pytest-xdist worker per core ($(TEST_WORKERS)): their models are tiny, and extra torch
# threads only add overhead and contention. A test file stays on one worker (its module fixtures built once) and the
# files that train in two processes share one (tests/conftest.py). The per-test timeout and the workers need
# pytest-timeout and pytest-xdist: a .venv made before they joined the test extra gets them here.
# --durations lists the slowest tests at the end of the run.
TEST_WORKERS ?= 2
test: setup
	$(PY) -c "import pytest_timeout, xdist" 2>/dev/null || $(PY) -m pip install --quiet -e ".[test]"
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=20

# The fast tier: the unit and contract tests of tests/unit/ (no training run, no dataset build) but those marked slow,
# under a minute on one core. `make test` stays the whole suite.
test-fast: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest tests/unit -m "not slow"

lint: setup
	$(VENV)/bin/ruff check src tests examples dataset_scripts custom_pipelines benchmarks

bench: setup
	$(PY) benchmarks/bench_renderer.py
