# The course's commands. `make run` and `make test` set everything up themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp
KERNEL := pytorch-course
# Builds and caches stay inside the project (`make clean` clears a stale lock).
export TORCH_EXTENSIONS_DIR := $(CURDIR)/build/torch_extensions
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/build/inductor_cache
export MPLCONFIGDIR := $(CURDIR)/build/matplotlib
# The offline mirror beside the checkout, when there is one (CI's layout).
ifneq ($(wildcard ../shared/datasets/MANIFEST.md),)
export COURSE_DATA_MIRROR ?= $(abspath ../shared/datasets)
endif
export PYTHONWARNINGS := ignore::DeprecationWarning:jupyter_client.connect
# Test workers: 2 by default (the CI machine has 2 cores); `make test WORKERS=1`.
# Each worker's kernels use one torch thread: two workers with two threads each
# on two cores slow small models down many times over.
WORKERS ?= 2
TEST_THREADS ?= 1

.PHONY: help setup run test lab data doctor progress notebooks check lint clean distclean

help:
	@echo "make run      execute every notebook and write build/report.md (the main job)"
	@echo "make test     unit tests + nbval + papermill smoke run of every notebook"
	@echo "make lab      open JupyterLab on notebooks/ with the course kernel"
	@echo "make data     fetch or copy every dataset into data/ (for offline workshops)"
	@echo "make doctor   preflight check of this machine"
	@echo "make progress your exercise verdicts per chapter (from build/progress.jsonl)"
	@echo "make notebooks  re-execute the .py sources into .ipynb with fresh outputs (authors)"
	@echo "make check    authors: sources in sync, lint, notebook hygiene"
	@echo "make clean    remove build/ (reports, caches, stale extension locks)"

setup: $(STAMP)

# Re-runs only when the pins or the package metadata change. pip's --no-compile skips
# byte-compiling the ~14,000 .py files of the packages at install time (about a minute
# here); Python compiles and caches each module the first time it is imported instead.
$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade "pip>=24"
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -r requirements.txt -c constraints.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "PyTorch course (.venv)" >/dev/null
	@touch $(STAMP)
	@echo "setup done: $(VENV) with torch $$($(PY) -c 'import torch; print(torch.__version__)')"

run: setup
	$(PY) -m helpers.runner

test: setup
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder --nbval-lax --nbval-current-env -p no:cacheprovider tests notebooks

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

data: setup
	$(PY) -m helpers.data fetch --all

doctor: setup
	$(PY) -m helpers.device

progress: setup
	@$(PY) -m helpers.exercises

notebooks: setup
	$(PY) -m helpers.authoring build $(NB)

check: lint
	$(PY) -m helpers.authoring check
	@if [ -f ../shared/tools/check_notebooks.py ]; then $(PY) ../shared/tools/check_notebooks.py notebooks; fi

lint: setup
	$(VENV)/bin/ruff check helpers tests conftest.py notebooks/*.py

clean:
	rm -rf build

distclean: clean
	rm -rf $(VENV) data/*/ 
