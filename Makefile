# The two commands a newcomer needs: `make run` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench soak replay-example clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever the dependencies change.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# The web server and one worker (scripts/run.sh); Ctrl-C stops both.
run: $(STAMP)
	DEBUG=$${DEBUG:-true} BIN=$(BIN) sh scripts/run.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/fold.py
	$(BIN)/python benchmarks/journal.py
	$(BIN)/python benchmarks/engine.py
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/ingest_http.py
	$(BIN)/python benchmarks/triage.py
	$(BIN)/python benchmarks/effects.py
	$(BIN)/python benchmarks/inbox.py
	$(BIN)/python benchmarks/locate.py
	$(BIN)/python benchmarks/faults.py --runs 20

# A thousand seeded runs of worker processes killed at every point of delivery (long).
soak: $(STAMP)
	$(BIN)/python benchmarks/faults.py --runs 1000

replay-example: $(STAMP)
	$(BIN)/python manage.py replay docs/examples/main-line.jsonl

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
