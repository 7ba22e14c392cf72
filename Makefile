# The commands: `make demo`, `make test` and `make bench`. Each builds the project's own .venv first
# (with the test and mpi extras: tests/test_mpi.py launches mpiexec -n 2 and -n 4).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,mpi]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/seed_tutorial.py

# The suite runs twice: on the default (fast) backend, then with every program run on both
# backends and their results and printed output compared (SHARDC_BACKEND=check). The MPI tests
# launch their own processes with their own backends: they run in the first pass only.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 tests
	SHARDC_BACKEND=check $(BIN)/python -m pytest -q -n 2 tests --ignore tests/test_mpi.py

# The benchmark harness (benchmarks/): BENCH_ARGS=--quick for a smoke run under a minute.
# JAX and matplotlib (the optional `bench` extra) add the JAX columns and the plots.
# benchmarks/mpi.py: each collective on mpiexec -n 2 and -n 4 against raw mpi4py.
# benchmarks/memory.py: the peak memory growth of first and steady calls, shardc and JAX.
# benchmarks/dispatch.py: the seed matmul with numpy inputs at each call, JAX and shardc in turns.
bench: $(STAMP)
	-$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python -m benchmarks $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.mpi $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.memory $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.dispatch $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
