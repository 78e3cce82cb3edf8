.PHONY: run test test-fast install lock
export PREFECT_SERVER_ANALYTICS_ENABLED=false

# the README's two commands: each installs .venv first when it is missing or older than the lock
run: .venv/.installed
	.venv/bin/dlrmflow run $(ARGS)

# four pytest workers on the 2 cores (pytest-xdist): the worker holding the session server's tests (tests/conftest.py:
# Slurm, the served nights, the UI forms) mostly waits on them, and the others keep the cores busy meanwhile; tests
# sharing a session server or trained runs stay on one worker (docs/testing.md has the measurements)
PYTEST_WORKERS ?= 4
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
