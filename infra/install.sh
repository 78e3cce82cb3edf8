#!/usr/bin/env bash
# One-command set-up: creates .venv with exactly the environment in infra/requirements.lock (the
# CPU stack: torch 2.13 CPU, fbgemm-gpu-cpu, torchrec without its CUDA fbgemm-gpu dependency,
# prefect 3.8.8, ...; every archive checked against its sha256) and this project in editable mode.
# Re-running is cheap (uv cache) and brings .venv back to the lock: packages not in it are removed.
#
#   bash infra/install.sh                  install (make install)
#   bash infra/install.sh --lock [OPTS]    re-resolve pyproject.toml into the lock (make lock); OPTS go
#                                          to `uv pip compile`, e.g. --upgrade or --upgrade-package prefect
#                                          (without them the versions already locked are kept)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
LOCK=infra/requirements.lock

if ! command -v uv >/dev/null 2>&1; then
    "$PYTHON" -m pip install --quiet "uv==0.13.9"
fi

# uv does not read pip's configuration: hand it pip's find-links (where the machine keeps
# its torch CPU wheel) and extra indexes explicitly. The lock names versions and hashes, not places.
find_links=$("$PYTHON" -m pip config get global.find-links 2>/dev/null || true)
extra_index=$("$PYTHON" -m pip config get global.extra-index-url 2>/dev/null || true)
index_args=()
for fl in $find_links; do index_args+=(--find-links "$fl"); done
for ix in $extra_index; do index_args+=(--extra-index-url "$ix"); done
# prefer the CPU wheel of torch from find-links over a same-version CUDA wheel on an index
index_args+=(--index-strategy unsafe-best-match)

if [ "${1:-}" = --lock ]; then
    shift
    # Resolved for the interpreter and platform the test suite runs on: CPython 3.11.7 on x86_64 Linux
    # with glibc >= 2.36 (Debian 12). Not universally: a universal resolution cannot see that the CPU
    # torch wheel exists only on find-links and locks torch's CUDA dependencies instead. Not for
    # manylinux_2_28 either: the local index has some versions only as newer manylinux wheels
    # (cryptography 50.0.2), and re-locking then flips them to an older version.
    echo "-e .[cpu,test]" | uv pip compile - --excludes infra/uv-excludes.txt \
        --python-version 3.11.7 --python-platform x86_64-manylinux_2_36 --generate-hashes \
        --custom-compile-command "make lock" "${index_args[@]}" -o "$LOCK" "$@"
    exit
fi

[ -x .venv/bin/python ] || uv venv --quiet --python "$PYTHON" .venv
# uv checks every hash in the lock (--require-hashes itself would reject the editable project line)
uv pip sync --python .venv/bin/python --compile-bytecode "${index_args[@]}" "$LOCK"

# Nothing the installed packages require may be missing, except torchrec's CUDA fbgemm-gpu, left out
# on purpose (infra/uv-excludes.txt). The lock is resolved for 3.11.7: on 3.11.0-3.11.2, say, redis
# would miss async-timeout, and a sync, which does not resolve, would not notice.
problems=$(uv pip check --python .venv/bin/python 2>&1 | grep '^The package' | grep -v 'requires `fbgemm-gpu`,' || true)
if [ -n "$problems" ]; then
    echo "error: .venv does not satisfy its own dependencies (regenerate $LOCK with 'make lock' on this platform?):" >&2
    echo "$problems" >&2
    exit 1
fi

# Chromium for the browser end-to-end test (Linux, Debian packages); optional elsewhere.
if [ "${DLRMFLOW_SKIP_CHROMIUM:-0}" != 1 ] && command -v apt-get >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
            || echo "warning: could not install chromium; the UI test will be skipped" >&2
    fi
fi

.venv/bin/python - <<'PY'
import torch, fbgemm_gpu, torchrec, prefect, polars
print(f"ok: torch {torch.__version__}, torchrec {torchrec.__version__ if hasattr(torchrec, '__version__') else '?'}, prefect {prefect.__version__}, polars {polars.__version__}")
PY
