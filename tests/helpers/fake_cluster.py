"""Fake Slurm commands (sbatch, scontrol, srun and a python that records each node's torchrun command line) for
what a real cluster cannot show (hostile strings in the rendered script; the real one: tests/e2e/test_slurm.py):
``fake_slurm(tmp_path, monkeypatch)`` puts them first on PATH; ``calls(tmp_path)`` reads what they were called with;
``executable(path, body)`` writes a Python script as an executable; ``sbatch_options(script)`` reads a batch
script's #SBATCH lines as sbatch does (the fake sbatch reads them so)."""

from __future__ import annotations

import inspect
import json
import os
import re
import stat
import sys
from pathlib import Path


def executable(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def sbatch_options(script: str, old: bool = False) -> list[str]:
    """The arguments of the #SBATCH lines of a batch script as sbatch parses them (``_opt_batch_script`` and
    ``_get_argument`` of Slurm's src/sbatch/opt.c): the directives end at the first command; the words 'packjob'
    and 'hetjob' are blanked first; outside quotes C whitespace splits and '#' ends the line; a backslash
    escapes the next character, inside quotes too. ``old``: the parser of older releases, where only double
    quotes quote and '#' ends the line even inside them."""
    args = []
    for line in script.split("\n"):
        if not line.startswith("#SBATCH"):
            if line.strip() and not line.startswith("#"):
                break
            continue
        rest = re.sub("(?i)hetjob", " " * 6, re.sub("(?i)packjob", " " * 7, line[len("#SBATCH"):]))
        i, space = 0, " \t\n\v\f\r"
        while True:
            while i < len(rest) and rest[i] in space:
                i += 1
            arg, quote, escape = "", None, False
            while i < len(rest) and (quote or rest[i] not in space):
                c = rest[i]
                i += 1
                if escape:
                    escape = False
                elif c == "\\":
                    escape = True
                    continue
                elif old and c == '"':
                    quote = None if quote else c
                    continue
                elif quote and not old:
                    if c == quote:
                        quote = None
                        continue
                elif c in "\"'" and not old:
                    quote = c
                    continue
                elif c == "#":
                    i = len(rest)
                    break
                arg += c
            assert not quote, f"unmatched quote in {line!r}"   # sbatch: fatal
            if not arg:
                break
            args.append(arg)
    return args


FAKE_SBATCH = "import re\n" + inspect.getsource(sbatch_options) + r"""
import json, os, subprocess, sys
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(["sbatch", *sys.argv[1:]]) + "\n")
assert sys.argv[1:3] == ["--wait", "--parsable"], sys.argv
text = open(sys.argv[3]).read()
options = dict(o[2:].partition("=")[::2] for o in sbatch_options(text))
out = re.sub("%([%j])", lambda m: "4242" if m.group(1) == "j" else "%", options["output"])   # Slurm's patterns
nodes = options["nodes"]
print("4242;cluster", flush=True)
env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[0-%d]" % (int(nodes) - 1),
       "SLURM_JOB_NUM_NODES": nodes}
with open(out, "w") as log:
    sys.exit(subprocess.call(["bash", sys.argv[3]], stdout=log, stderr=subprocess.STDOUT, env=env))
"""
FAKE_SCONTROL = r"""
import sys
assert sys.argv[1:3] == ["show", "hostnames"], sys.argv
n = int(sys.argv[3].split("-")[1].rstrip("]")) + 1
print("\n".join("node%d" % i for i in range(n)))
"""
FAKE_SRUN = r"""
import json, os, subprocess, sys
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(["srun", *sys.argv[1:]]) + "\n")
opts = [a for a in sys.argv[1:] if a.startswith("--")]
cmd = sys.argv[1 + len(opts):]
nodes = int(next(o for o in opts if o.startswith("--nodes=")).split("=")[1])
procs = [subprocess.Popen(cmd, env={**os.environ, "SLURM_NODEID": str(i)}) for i in range(nodes)]
sys.exit(max(p.wait() for p in procs))
"""
FAKE_PYTHON = r"""
import json, os, sys
node = os.environ.get("SLURM_NODEID") or os.environ["JOB_COMPLETION_INDEX"]
# one write per whole line: both fake nodes append to the same job log, and print() writes the text
# and its newline separately when stdout is unbuffered (PYTHONUNBUFFERED), so lines could merge
os.write(1, ("node %s argv %s\n" % (node, json.dumps(sys.argv[1:]))).encode())
env = {k: os.environ.get(k) for k in ("NCCL_IB_GID_INDEX", "PET_TEE", "X")}
os.write(1, ("node %s env %s\n" % (node, json.dumps(env))).encode())
"""


def fake_slurm(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "sbatch", FAKE_SBATCH)
    executable(bin_dir / "scontrol", FAKE_SCONTROL)
    executable(bin_dir / "srun", FAKE_SRUN)
    python = executable(bin_dir / "fake-python", FAKE_PYTHON)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "calls.jsonl"))
    settings = {"nodes": 2, "partition": "mi300x", "time_limit": "01:00:00", "sbatch_options": ["--qos=high"],
                "setup": ["echo setting up"], "python": str(python), "work_dir": str(tmp_path / "slurm"),
                "sbatch": str(bin_dir / "sbatch")}
    return tmp_path, settings


def calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]

