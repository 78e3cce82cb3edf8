.PHONY: install lock test test-fast
export PREFECT_SERVER_ANALYTICS_ENABLED=false

install:
	bash infra/install.sh

# re-resolve pyproject.toml into infra/requirements.lock (keeps locked versions unless LOCK_ARGS=--upgrade)
lock:
	bash infra/install.sh --lock $(LOCK_ARGS)

test:
	.venv/bin/python -m pytest -q

test-fast:
	.venv/bin/python -m pytest -q -m "not slow"
