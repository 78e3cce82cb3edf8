.PHONY: run test test-fast install lock
export PREFECT_SERVER_ANALYTICS_ENABLED=false

# the README's two commands: each installs .venv first when it is missing or older than the lock
run: .venv/.installed
	.venv/bin/dlrmflow run $(ARGS)

test: .venv/.installed
	.venv/bin/python -m pytest -q

test-fast: .venv/.installed
	.venv/bin/python -m pytest -q -m "not slow"

.venv/.installed: infra/requirements.lock pyproject.toml
	bash infra/install.sh
	touch $@

# bring .venv back to the lock, whatever its state
install:
	bash infra/install.sh
	touch .venv/.installed

# re-resolve pyproject.toml into infra/requirements.lock (keeps locked versions unless LOCK_ARGS=--upgrade)
lock:
	bash infra/install.sh --lock $(LOCK_ARGS)
