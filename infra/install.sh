#!/usr/bin/env bash
# One-command set-up: creates .venv with exactly the environment in infra/requirements.lock (the
# CPU stack: torch 2.13 CPU, fbgemm-gpu-cpu, torchrec without its CUDA fbgemm-gpu dependency,
# prefect 3.9.1, ...; every archive checked against its sha256) and this project in editable mode.
# Re-running is cheap (uv cache) and brings .venv back to the lock: packages not in it are removed.
# Needs only bash, coreutils and a CPython 3.11-3.13 on x86_64 Linux (glibc 2.28+): no pip, no venv
# module, no uv (the pinned uv wheel is fetched from PyPI with Python's standard library, checked
# against its sha256, and its binary kept in ~/.cache/dlrmflow).
#
#   bash infra/install.sh                  install (make install)
#   bash infra/install.sh --lock [OPTS]    re-resolve pyproject.toml into the lock (make lock); OPTS go
#                                          to `uv pip compile`, e.g. --upgrade or --upgrade-package prefect
#                                          (without them the versions already locked are kept)
#   bash infra/install.sh --python         print the interpreter a new .venv would get, and exit
#   bash infra/install.sh --uv             print the uv the install uses (fetching it if needed), and exit
#
# Environment: PYTHON=/path/to/python3.X uses that interpreter instead of picking one from PATH (python3.11,
# then 3.12, 3.13, python3); DLRMFLOW_TORCH_INDEX: where torch's CPU wheel comes from when pip's find-links
# have none for the Python (default https://download.pytorch.org/whl/cpu; `none`: nowhere else).
# What only the tests need from the system (Chromium, Slurm) the test run installs (tests/helpers/fixtures.py).
set -euo pipefail
cd "$(dirname "$0")/.."

UV_PIN="uv==0.13.9"   # the cpu image's UV_VERSION too
UV_VERSION=${UV_PIN#uv==}
UV_WHEEL=uv-$UV_VERSION-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
UV_WHEEL_SHA256=d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19
UV_DIR=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/dlrmflow/uv-$UV_VERSION
PYPI=https://pypi.org/simple
TORCH_INDEX=${DLRMFLOW_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
LOCK=infra/requirements.lock
TORCH_LOCK=infra/torch-cpu.lock   # torch's version and the hashes of its CPU wheels (make lock adds them)
SUPPORTED="CPython 3.11, 3.12 or 3.13"
export UV_PYTHON_DOWNLOADS=never  # uv uses the interpreter chosen here and never downloads one
# uv trusts the system's certificates, as the standard-library fetch of uv does (a proxy's own CA included)
export UV_SYSTEM_CERTS=${UV_SYSTEM_CERTS:-1}

die() { echo "error: $*" >&2; exit 1; }

check_platform() {
    local os arch glibc major minor
    os=$(uname -s) arch=$(uname -m)
    [ "$os/$arch" = Linux/x86_64 ] ||
        die "dlrmflow installs on x86_64 Linux with glibc 2.28 or newer, this is $os/$arch: use such a machine or the CPU image (infra/docker/cpu.Dockerfile)"
    glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null || true)
    IFS=. read -r major minor _ <<<"${glibc#glibc }"
    [[ "$glibc" == glibc\ * && ( "$major" -gt 2 || ( "$major" -eq 2 && "${minor:-0}" -ge 28 ) ) ]] ||
        die "dlrmflow needs glibc 2.28 or newer (torch's wheels are manylinux_2_28), this system has ${glibc:-no glibc}: use a newer distribution (e.g. Debian 12, Ubuntu 22.04) or the CPU image"
}

# "MAJOR MINOR MICRO IMPLEMENTATION EXECUTABLE" of interpreter $1; nothing if it does not run (a pyenv shim
# for a version that is not installed, say)
probe() {
    "$1" -c 'import sys; print(*sys.version_info[:3], sys.implementation.name, sys.executable)' </dev/null 2>/dev/null || true
}

# the interpreter for a new .venv: $PYTHON if set (refused if unsupported), else the first CPython 3.11 on
# PATH (what the test suite runs on), then 3.12, then 3.13
pick_python() {
    local cand info maj min mic impl exe found=() best="" best_min=99
    if [ -n "${PYTHON:-}" ]; then
        info=$(probe "$PYTHON")
        [ -n "$info" ] || die "PYTHON=$PYTHON does not run: set PYTHON to a $SUPPORTED interpreter (e.g. PYTHON=python3.11), or unset it to pick one from PATH"
        read -r maj min mic impl exe <<<"$info"
        [ "$impl" = cpython ] && [ "$maj" = 3 ] && [ "$min" -ge 11 ] && [ "$min" -le 13 ] ||
            die "PYTHON=$PYTHON is ${impl/cpython/CPython} $maj.$min.$mic; dlrmflow needs $SUPPORTED: set PYTHON to one (e.g. PYTHON=python3.11), or unset it to pick one from PATH"
        echo "$exe"
        return
    fi
    for cand in python3.11 python3.12 python3.13 python3 python3.10; do
        command -v "$cand" >/dev/null 2>&1 || continue
        info=$(probe "$cand")
        [ -n "$info" ] || continue
        read -r maj min mic impl exe <<<"$info"
        found+=("$cand is ${impl/cpython/CPython} $maj.$min.$mic")
        if [ "$impl" = cpython ] && [ "$maj" = 3 ] && [ "$min" -ge 11 ] && [ "$min" -le 13 ] && [ "$min" -lt "$best_min" ]; then
            best=$exe best_min=$min
        fi
    done
    [ -n "$best" ] || {
        local list="no python3 found"
        [ ${#found[@]} = 0 ] || { printf -v list '%s; ' "${found[@]}"; list=${list%; }; }
        die "no $SUPPORTED on PATH ($list): install one (e.g. apt install python3.11, or pyenv install 3.11) and run again, or set PYTHON=/path/to/python3.11"
    }
    echo "$best"
}

# sets UV: uv $UV_VERSION from PATH, else from $UV_DIR, else fetched there from PyPI (sha256-checked) with
# Python $1's standard library
ensure_uv() {
    local have
    for UV in "$(command -v uv || true)" "$UV_DIR/uv"; do
        [ -n "$UV" ] && [ -x "$UV" ] || continue
        have=$("$UV" --version 2>/dev/null || true)
        read -r _ have _ <<<"$have"
        [ "$have" = "$UV_VERSION" ] && return
    done
    "$1" - "$UV_DIR" "$UV_VERSION" "$UV_WHEEL" "$UV_WHEEL_SHA256" "$PYPI" <<'PY'
import hashlib, html, os, re, sys, tempfile, urllib.parse, urllib.request, zipfile
dest, version, filename, sha256, index = sys.argv[1:]
url = os.environ.get("DLRMFLOW_UV_WHEEL_URL")  # another place to take the same wheel from (a mirror)

def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)

try:
    if not url:
        page_url = f"{index}/uv/"
        page = urllib.request.urlopen(page_url, timeout=60).read().decode()
        links = [html.unescape(href).split("#")[0] for href in re.findall(r'href="([^"]+)"', page)]
        url = next((urllib.parse.urljoin(page_url, link) for link in links if link.rsplit("/", 1)[-1] == filename), None)
        if url is None:
            fail(f"{filename} is not listed on {page_url}: put uv {version} on PATH and run again")
    os.makedirs(dest, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        wheel, digest = os.path.join(tmp, filename), hashlib.sha256()
        with urllib.request.urlopen(url, timeout=60) as response, open(wheel, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            fail(f"{url} has sha256 {digest.hexdigest()}, not uv {version}'s {sha256}: refused, nothing installed")
        with zipfile.ZipFile(wheel) as archive:
            binary = archive.read(f"uv-{version}.data/scripts/uv")
        with open(os.path.join(tmp, "uv"), "wb") as out:
            out.write(binary)
        os.chmod(os.path.join(tmp, "uv"), 0o755)
        os.replace(os.path.join(tmp, "uv"), os.path.join(dest, "uv"))
except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:  # urllib's errors are OSErrors
    fail(f"could not fetch uv {version} from {url or index} ({error}): put uv {version} on PATH and run again")
print(f"fetched uv {version} from {url} (sha256 checked) into {dest}", file=sys.stderr)
PY
    UV=$UV_DIR/uv
}

# pip's find-links, extra-index-url and index-url (its config files and PIP_* variables, as pip reads them),
# one "key value" a line: uv does not read pip's configuration, and a machine may keep wheels there
pip_config() {
    "$1" - <<'PY'
import configparser, os
keys = ("index-url", "extra-index-url", "find-links")
env_file = os.environ.get("PIP_CONFIG_FILE")
files = []
if env_file != os.devnull:
    files += [os.path.join(d, "pip", "pip.conf") for d in os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":") if d]
    home = os.path.expanduser("~")
    files += ["/etc/pip.conf", os.path.join(home, ".pip", "pip.conf"),
              os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "pip", "pip.conf")]
    files += [env_file] if env_file else []
values = {}
for path in files:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except (configparser.Error, OSError, UnicodeDecodeError):
        continue
    for section in ("global", "install"):
        if parser.has_section(section):
            for key, value in parser.items(section):
                if key.replace("_", "-") in keys:
                    values[key.replace("_", "-")] = value
for key in keys:
    if (value := os.environ.get("PIP_" + key.upper().replace("-", "_"))) is not None:
        values[key] = value
for key, value in values.items():
    for item in value.split():
        print(key, item)
PY
}

# sets index_args and torch_from for uv: pip's find-links; torch's CPU wheel from them when they have it for
# CPython 3.$2 (any minor when $2 is '*'), else from $TORCH_INDEX, consulted last; PyPI (or pip's index-url)
# for everything else; pip's extra indexes too when $3 is 'sync' (never for the lock: a local index
# may hold some of a version's files only, and the lock must name every file's hash)
set_index_args() {
    local key value default=$PYPI torch_version dir
    local -a find_links=() extra=()
    while read -r key value; do
        case $key in
            find-links) find_links+=("$value") ;;
            extra-index-url) extra+=("$value") ;;
            index-url) default=$value ;;
        esac
    done < <(pip_config "$1")
    torch_version=$(sed -n 's/^torch==\([^ ]*\).*/\1/p' "$TORCH_LOCK")
    index_args=() torch_from=""
    for value in "${find_links[@]}"; do
        index_args+=(--find-links "$value")
        dir=${value#file://}
        if [ -z "$torch_from" ] && [ -d "$dir" ] &&
            compgen -G "$dir/torch-$torch_version-cp3$2-cp3$2-*x86_64.whl" >/dev/null; then
            torch_from=$dir
        fi
    done
    if [ -z "$torch_from" ] && [ "$TORCH_INDEX" != none ]; then
        # lowest priority: a package on both takes PyPI's files, so only what PyPI lacks (torch's +cpu
        # build) comes from the PyTorch index; the lock's hashes hold every file either way
        index_args+=(--default-index "$TORCH_INDEX")
        torch_from=$TORCH_INDEX
    else
        index_args+=(--default-index "$default")
        default=""
    fi
    if [ "$3" = sync ]; then
        for value in "${extra[@]}"; do index_args+=(--index "$value"); done
    fi
    [ -z "$default" ] || index_args+=(--index "$default")
    index_args+=(--index-strategy unsafe-best-match)
}

check_platform
case "${1:-}" in
    --python)
        pick_python
        exit ;;
    --uv)
        py=$(pick_python)
        ensure_uv "$py"
        echo "$UV"
        exit ;;
    --lock)
        shift
        py=$(pick_python)
        ensure_uv "$py"
        set_index_args "$py" '*' lock
        # One lock for CPython 3.11-3.13 (requires-python), forked by markers where versions differ (e.g.
        # async-timeout below 3.11.3), with the hashes of every file of each locked version. torch is pinned
        # to its CPU build; the resolution reads its metadata from the one wheel it reaches, so the other
        # Pythons' wheel hashes come from $TORCH_LOCK. The locked versions are kept (preferences, unless
        # --upgrade...), their hashes are not: uv would reuse the old lock's, which may name fewer files.
        tmp=$(mktemp "$LOCK.XXXXXX")
        trap 'rm -f "$tmp"' EXIT
        [ ! -f "$LOCK" ] || sed -e '/^    --hash=/d' -e 's/ \\$//' "$LOCK" >"$tmp"
        printf -- '-e .[cpu,test]\n%s\n' "$(grep -m1 '^torch==' "$TORCH_LOCK" | cut -d' ' -f1)" |
            "$UV" pip compile - --universal --python "$py" --python-version 3.11 \
                --excludes infra/uv-excludes.txt --generate-hashes --custom-compile-command "make lock" \
                "${index_args[@]}" -o "$tmp" "$@"
        "$py" - "$tmp" "$TORCH_LOCK" <<'PY'
import re, sys
lock_path, torch_path = sys.argv[1:]
torch = open(torch_path).read()
version = re.search(r"^torch==(\S+)", torch, re.M).group(1)
known = re.findall(r"--hash=sha256:([0-9a-f]{64})", torch)
lines, out, i, seen = open(lock_path).read().split("\n"), [], 0, False
while i < len(lines):
    if m := re.match(r"torch==(\S+)(.*?)(?: \\)?$", lines[i]):
        if m[1] != version:
            sys.exit(f"error: the lock has torch=={m[1]}, {torch_path} is for torch=={version}: update {torch_path}")
        j = i + 1
        while j < len(lines) and lines[j].startswith("    --hash="):
            j += 1
        hashes = sorted(set(re.findall(r"sha256:([0-9a-f]{64})", "\n".join(lines[i + 1:j]))) | set(known))
        out += [f"torch=={m[1]}{m[2]} \\"] + [f"    --hash=sha256:{h}" + (" \\" if k < len(hashes) - 1 else "")
                                              for k, h in enumerate(hashes)]
        i, seen = j, True
        continue
    out.append(lines[i])
    i += 1
if not seen:
    sys.exit(f"error: no torch in {lock_path}")
open(lock_path, "w").write("\n".join(out))
PY
        chmod 644 "$tmp" && mv "$tmp" "$LOCK"
        exit ;;
esac

# the interpreter: .venv's own while it is a supported one, else a new .venv from pick_python
venv_info=$( [ -x .venv/bin/python ] && probe .venv/bin/python || true )
read -r maj min _ impl _ <<<"${venv_info:-0 0 0 none x}"
if [ "$impl" = cpython ] && [ "$maj" = 3 ] && [ "$min" -ge 11 ] && [ "$min" -le 13 ]; then
    py=.venv/bin/python
else
    py=$(pick_python)
    ensure_uv "$py"
    [ ! -e .venv ] || echo "install: .venv has no supported Python (${venv_info:-none runs}): making it anew" >&2
    "$UV" venv --quiet --clear --python "$py" .venv
    read -r maj min _ <<<"$(probe .venv/bin/python)"
fi
ensure_uv "$py"
set_index_args "$py" "$min" sync
echo "install: .venv on $(.venv/bin/python -V) ($py), uv $UV_VERSION ($UV), torch's CPU wheel from ${torch_from:-the indexes}"
# uv checks every hash in the lock (--require-hashes itself would reject the editable project line); no
# --compile-bytecode: it compiled all 20,331 files (52 CPU-s, 35-100 s here), most of them never imported; the last
# check below caches the bytecode of what every command imports, the rest is cached when first imported (where
# $PYTHONDONTWRITEBYTECODE allows; the test run always lets it: tests/conftest.py)
"$UV" pip sync --python .venv/bin/python "${index_args[@]}" "$LOCK"

# Nothing the installed packages require may be missing, except torchrec's CUDA fbgemm-gpu, left out
# on purpose (infra/uv-excludes.txt). A sync does not resolve, so this catches a lock whose markers
# missed something on this Python.
problems=$("$UV" pip check --python .venv/bin/python 2>&1 | grep '^The package' | grep -v 'requires `fbgemm-gpu`,' || true)
if [ -n "$problems" ]; then
    echo "error: .venv does not satisfy its own dependencies (regenerate $LOCK with 'make lock'?):" >&2
    echo "$problems" >&2
    exit 1
fi

# The last check: the stack imports, in two interpreters at once (the torch side, Prefect's), each caching the
# bytecode of what it imports (one interpreter took 31 s here, two 16 s)
imports() { PYTHONDONTWRITEBYTECODE= .venv/bin/python -c "$1"; }
torch_side=$(mktemp)
imports "import torch, fbgemm_gpu, torchrec
print(f'torch {torch.__version__}, torchrec {getattr(torchrec, \"__version__\", \"?\")}')" >"$torch_side" &
prefect_side=$(imports "import prefect, polars, prefect.server.api.server
print(f'prefect {prefect.__version__}, polars {polars.__version__}')") || { wait; rm -f "$torch_side"; exit 1; }
wait $! || { rm -f "$torch_side"; exit 1; }
echo "ok: $(cat "$torch_side"), $prefect_side"
rm -f "$torch_side"
