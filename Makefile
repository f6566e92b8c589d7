# Every target bootstraps .venv itself, so a fresh clone needs only Python 3.11+ and pip.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
CONFIG ?= config.example.toml
# tests/test_packaging.py installs the built wheel beside the OpenAI Agents SDK in a fresh
# environment without reaching the internet: the set-up downloads what that needs, once.
WHEELHOUSE := $(VENV)/wheelhouse
NEIGHBOURS := 'openai-agents>=0.24,<1' 'setuptools>=77'

.PHONY: run test lint typecheck pytest soak bench bench-all clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The peers the comparison measures and matplotlib: the bench extra, never a runtime dependency.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

$(WHEELHOUSE)/.complete: $(STAMP)
	$(BIN)/python -m pip download --quiet --dest $(WHEELHOUSE) . $(NEIGHBOURS)
	touch $@

run: $(STAMP)
	$(BIN)/gateway serve --config $(CONFIG)

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# Test files are dealt out to TEST_WORKERS processes, each file's tests kept on one (its module
# fixtures, such as the built wheel or the browser, are made once); 1 runs them in this process.
TEST_WORKERS ?= 2

pytest: $(STAMP) $(WHEELHOUSE)/.complete
	$(BIN)/pytest $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The long versions of tests/reliability (docs/reliability.md); `make test` runs the short ones.
soak: $(STAMP)
	GATEWAY_SOAK=long $(BIN)/pytest tests/reliability -s

# The gateway beside python-telegram-bot and chatflow-agent (docs/benchmarks.md): about 12
# minutes on two cores; writes the tables into docs/benchmarks.md and the PNGs into docs/bench/.
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.compare

# The older benches, one after the other (well over 15 minutes together; each runs alone too).
bench-all: $(STAMP)
	$(BIN)/python -m bench.store
	$(BIN)/python -m bench.ingest
	$(BIN)/python -m bench.e2e
	$(BIN)/python -m bench.capacity
	$(BIN)/python -m bench.history
	$(BIN)/python -m bench.acks

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
