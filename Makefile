.PHONY: install test test-fast
export PREFECT_SERVER_ANALYTICS_ENABLED=false

install:
	bash infra/install.sh

test:
	.venv/bin/python -m pytest -q

test-fast:
	.venv/bin/python -m pytest -q -m "not slow"
