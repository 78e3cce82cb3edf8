#!/usr/bin/env bash
# One-command set-up: creates .venv with the pinned CPU stack (torch 2.13 CPU, fbgemm-gpu-cpu,
# torchrec without its CUDA fbgemm-gpu dependency, prefect 3.8.8, ...) and this project in
# editable mode. Re-running is cheap (uv cache).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3

if ! command -v uv >/dev/null 2>&1; then
    "$PYTHON" -m pip install --quiet "uv==0.13.9"
fi

# uv does not read pip's configuration: hand it pip's find-links (where the machine keeps
# its torch CPU wheel) and extra indexes explicitly.
find_links=$("$PYTHON" -m pip config get global.find-links 2>/dev/null || true)
extra_index=$("$PYTHON" -m pip config get global.extra-index-url 2>/dev/null || true)
uv_args=(--python .venv/bin/python --excludes infra/uv-excludes.txt --compile-bytecode)
for fl in $find_links; do uv_args+=(--find-links "$fl"); done
for ix in $extra_index; do uv_args+=(--extra-index-url "$ix"); done
# prefer the CPU wheel of torch from find-links over a same-version CUDA wheel on an index
uv_args+=(--index-strategy unsafe-best-match)

[ -x .venv/bin/python ] || uv venv --quiet --python "$PYTHON" .venv
uv pip install "${uv_args[@]}" -e ".[cpu,test]"

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
