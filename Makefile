# The two commands: `make demo` and `make test`. Both build the project's own .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/seed_tutorial.py

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 tests

clean:
	rm -rf $(VENV) build *.egg-info
