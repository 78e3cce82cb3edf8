.PHONY: run test test-fast install lock
export PREFECT_SERVER_ANALYTICS_ENABLED=false

# the README's two commands: each installs .venv first when it is missing or older than the lock
run: .venv/.installed
	.venv/bin/dlrmflow run $(ARGS)

# three pytest workers on the 2 cores (pytest-xdist; a third keeps the cores busy while a test waits on a server or
# a poll); four were faster but put the suite's timing bounds at risk (benchmarks/RESULTS.md, "The suite's time"); tests
# sharing a session server or trained runs stay on one worker (tests/conftest.py)
PYTEST_WORKERS ?= 3
PYTEST = .venv/bin/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

test: .venv/.installed
	$(PYTEST)

test-fast: .venv/.installed
	$(PYTEST) -m "not slow"

.venv/.installed: infra/requirements.lock pyproject.toml
	bash infra/install.sh
	touch $@

# bring .venv back to the lock, whatever its state (PYTHON=/path/to/python3.X picks the interpreter of a new .venv)
install:
	bash infra/install.sh
	touch .venv/.installed

# re-resolve pyproject.toml into infra/requirements.lock, one lock for CPython 3.11-3.13 with torch's CPU wheel
# hashes from infra/torch-cpu.lock (keeps locked versions unless LOCK_ARGS=--upgrade)
lock:
	bash infra/install.sh --lock $(LOCK_ARGS)
