# The two entry points a newcomer needs: `make run` and `make test`.
# Each creates .venv on first use and installs the project with what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[fast,test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/dra-extender serve --snapshot examples/cluster

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest
