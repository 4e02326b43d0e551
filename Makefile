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
# Setup installs with --no-compile (below), so Python must be free to cache each module's bytecode on
# first import. Some containers set PYTHONDONTWRITEBYTECODE=1; then every process (each kernel, each
# spawned worker or rank) compiles torch again: `import torch` took 7.7 s instead of 3.6 s on 2 cores.
unexport PYTHONDONTWRITEBYTECODE
# `make test SHARD=2/3`: the second of three balanced shares (conftest.py), for a suite spread over CI machines.
# Test workers: 2 by default (the CI machine has 2 cores); `make test WORKERS=1`.
# Each worker's kernels use one torch thread: two workers with two threads each
# on two cores slow small models down many times over.
WORKERS ?= 2
TEST_THREADS ?= 1

.PHONY: help setup wheelhouse run teaching test lab site data serve-mirror doctor progress notebooks check lint clean distclean

help:
	@echo "make run      execute every notebook and write build/report.md (the main job)"
	@echo "make teaching  TEACHING.md's chapter table from the last make run"
	@echo "make test     unit tests + nbval + papermill smoke run of every notebook"
	@echo "make lab      open JupyterLab on notebooks/ with the course kernel"
	@echo "make site     the course as a static HTML book in build/site/ (stored outputs; runs nothing)"
	@echo "make data     fetch or copy every dataset into data/ (for offline workshops)"
	@echo "make wheelhouse DIR=...  download every pinned package as wheels (then: make setup WHEELHOUSE=...)"
	@echo "make serve-mirror  serve the datasets on the LAN; it prints the COURSE_DATA_MIRROR learners set"
	@echo "make doctor   preflight check of this machine"
	@echo "make progress your exercise verdicts per chapter (from build/progress.jsonl)"
	@echo "make notebooks  re-execute the .py sources into .ipynb with fresh outputs (authors)"
	@echo "make check    authors: sources in sync, lint, notebook hygiene"
	@echo "make clean    remove build/ (reports, caches, stale extension locks)"

setup: $(STAMP)

# Re-runs only when the pins or the package metadata change. pip's --no-compile skips
# byte-compiling the ~14,000 .py files of the packages at install time (about a minute
# here); Python compiles and caches each module the first time it is imported instead.
# `make setup WHEELHOUSE=<folder>` installs from a folder of wheels with no network (helpers/wheelhouse.py).
ifdef WHEELHOUSE
PIP_INSTALL = $(PY) helpers/wheelhouse.py install $(WHEELHOUSE) --quiet
else
PIP_INSTALL = $(PY) -m pip install --quiet --disable-pip-version-check
endif

$(STAMP): requirements.txt constraints.txt pyproject.toml jupyter/overrides.json
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade "pip>=24"
	$(PIP_INSTALL) --no-compile -r requirements.txt -c constraints.txt
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "PyTorch course (.venv)" >/dev/null
	install -D -m 644 jupyter/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json  # no news prompt
	@touch $(STAMP)
	@echo "setup done: $(VENV) with torch $$($(PY) -c 'import torch; print(torch.__version__)')"

# For offline workshops: every pinned package as wheels, in DIR (run where there is internet, on the
# learners' OS, CPU architecture and Python version), then `make setup WHEELHOUSE=DIR` on each machine.
wheelhouse:
	@test -n "$(DIR)" || { echo "usage: make wheelhouse DIR=<folder for the wheels>" >&2; exit 2; }
	$(PYTHON) helpers/wheelhouse.py build $(DIR) "pip>=24" -r requirements.txt -c constraints.txt

run: setup
	$(PY) -m helpers.runner

# TEACHING.md's chapter table, from the times of the last `make run` (build/report.json).
teaching: setup
	$(PY) -m helpers.teaching

test: setup
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder --nbval-lax --nbval-current-env -p no:cacheprovider $(if $(SHARD),--shard $(SHARD)) tests notebooks

# Prints the address to open; with no display (a server, SSH) it opens no browser and still runs.
lab: setup
	$(VENV)/bin/jupyter lab $(if $(DISPLAY)$(WAYLAND_DISPLAY)$(filter Darwin,$(shell uname)),,--no-browser) $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/

# The course as a static HTML book from the notebooks' stored outputs (helpers/site.py, site/conf.py):
# nothing is executed and nothing fetched; it prints the page to open and the build time.
site: setup
	$(PY) -m helpers.site

data: setup
	$(PY) -m helpers.data fetch --all

# A classroom's data mirror on the LAN (helpers/http_mirror.py): serves the folder mirror if one is set, else data/.
PORT ?= 8765
serve-mirror: setup
	$(PY) -m helpers.http_mirror serve --port $(PORT) $(if $(DIR),--dir $(DIR))

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
	$(VENV)/bin/ruff check helpers tests conftest.py notebooks/src/*.py

clean:
	rm -rf build

distclean: clean
	rm -rf $(VENV) data/*/ 
