# Two entry points: `make demo` and `make test`. Each creates .venv on first use. The demo
# installs only the core package; `make test` adds the `dev` extra. Packages are installed with
# uv (several times faster than pip on a fresh clone): the one on PATH, or else one that pip
# puts into .venv first (pip does it all if that fails).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(shell command -v uv 2>/dev/null)
CORE := $(VENV)/.core-installed
STAMP := $(VENV)/.installed

ifneq ($(UV),)
NEW_VENV = $(UV) venv -q --seed --python $(PY) $(VENV)
install = $(UV) pip install -q --python $(BIN)/python $(1)
else
NEW_VENV = $(PY) -m venv $(VENV) && ($(BIN)/python -m pip install -q uv || true)
install = if [ -x $(BIN)/uv ]; then $(BIN)/uv pip install -q --python $(BIN)/python $(1); \
	else $(BIN)/python -m pip install -q $(1); fi
endif

.PHONY: demo test lint typecheck docs unit js conformance bench clean dist

$(BIN)/python:
	$(NEW_VENV)

$(CORE): pyproject.toml | $(BIN)/python
	$(call install,-e .)
	touch $(CORE)

$(STAMP): pyproject.toml | $(BIN)/python
	$(call install,-e '.[dev]')
	touch $(STAMP) $(CORE)

demo: $(CORE)
	$(BIN)/python -m runstream demo

LINTED := $(wildcard src tests bench examples mkdocs_hooks.py)

lint: $(STAMP)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check $(LINTED)

typecheck: $(STAMP)
	$(BIN)/mypy

# pytest-xdist: two workers by default (the 2-core machine: a whole run in ~8 min instead of ~16);
# a test file stays on one worker, so module-scoped servers (Studio, a Temporal cluster, a vendor
# kit) start once, and each worker has its own session servers. PYTEST_WORKERS=0 runs one process.
# Files are handed out in collection order, which tests/conftest.py starts with the longest files
# (--no-loadscope-reorder: xdist would otherwise order them by their number of tests), so that no
# worker is left alone with a two-minute file at the end.
PYTEST_WORKERS ?= 2

unit: $(STAMP) js
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The JavaScript clients of the interop tests (npm ci, about a minute on a fresh clone): its own
# target, so that under -j it runs while .venv is installed.
js:
	sh tests/js/setup.sh

# The documentation site (mkdocs.yml) into site/: --strict fails on a broken link, anchor or
# cross-reference, and on a page of docs/ missing from the nav (add new pages to mkdocs.yml).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # (-q would hide the warnings --strict counts)

# All parts at once: ruff, mypy and mkdocs use the CPU while pytest waits on its subprocesses
# and servers. Any part that fails fails `make test` (once the others have finished). Output
# is not synced, so pytest's progress shows as it goes (--output-sync would hold it to the end).
test:
	$(MAKE) --no-print-directory -j4 lint typecheck docs unit

# The wheel and the sdist, into dist/ (uv's build frontend; hatchling is the backend).
dist: $(STAMP)
	$(if $(UV),$(UV),$(BIN)/uv) build -q --out-dir dist

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache dist site
