# The two commands a newcomer needs: `make run` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The locks: every package pinned with its hashes (requirements/*.txt, made by `make lock`).
RUNTIME_LOCK := requirements/runtime.txt
DEV_LOCK := requirements/dev.txt
PIP_COMPILE := $(BIN)/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe \
	--no-emit-find-links --no-emit-index-url --no-emit-trusted-host

.PHONY: run test lint lock bench soak replay-example clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever the dependencies or their lock change: exactly the locked files (pip
# refuses any whose hash differs), then Ephyra itself without resolving anything again.
$(STAMP): pyproject.toml $(DEV_LOCK) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --require-hashes -r $(DEV_LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

# Write the locks again from pyproject.toml. Pins already in a lock are kept (a new dependency
# is added, nothing else moves); `make lock UPGRADE=--upgrade` moves everything to the newest.
lock: | $(STAMP)
	$(PIP_COMPILE) $(UPGRADE) --output-file $(RUNTIME_LOCK) pyproject.toml
	$(PIP_COMPILE) $(UPGRADE) --extra dev --output-file $(DEV_LOCK) pyproject.toml

# The web server and one worker (scripts/run.sh); Ctrl-C stops both.
run: $(STAMP)
	DEBUG=$${DEBUG:-true} BIN=$(BIN) sh scripts/run.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# pytest in several processes (pytest-xdist), each with its own data directory and Redis
# database (tests/settings.py): most tests wait on subprocesses, servers and Git, so four share
# two cores well. `make test TEST_PROCESSES=0` runs every test in one process.
TEST_PROCESSES ?= 4

# A model changed without its migration fails here, before any test runs.
test: lint
	DEBUG=true $(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python -m pytest -n $(TEST_PROCESSES)

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
