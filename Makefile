# Two entry points: `make demo` and `make test`. Each creates .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit conformance bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m runstream demo

LINTED := $(wildcard src tests bench examples)

lint: $(STAMP)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check $(LINTED)

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	sh tests/js/setup.sh
	$(BIN)/python -m pytest

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
