"""Resume: kill -9 a preprocessing run part-way (twice, in different stages), rerun, get identical bytes."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from preprocessing import PreprocessConfig, run
from helpers.datasets import assert_same_files
from helpers.paths import HELPERS


def _start(inputs: Path, out: Path, workers: int) -> subprocess.Popen:
    """`dlrmflow preprocess` pausing 0.3 s after each per-file part (tests/helpers/slow_preprocess.py)."""
    cmd = [sys.executable, str(HELPERS / "slow_preprocess.py"), "0.3", "preprocess",
           "--input", str(inputs), "--out", str(out), "--frequency-threshold", "2", "--workers", str(workers),
           "--no-progress"]
    return subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _kill_when(proc: subprocess.Popen, out: Path, pattern: str, n: int) -> None:
    deadline = time.time() + 60
    while len(list(out.glob(pattern))) < n:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.time() < deadline, f"no {pattern} after 60 s"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)   # the command and its worker processes
    proc.wait()


def test_killed_run_resumes_to_identical_bytes(criteo_10k, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    with gzip.open(criteo_10k, "rt") as f:
        lines = f.readlines()
    for i in range(20):
        (inputs / f"part{i:02d}.tsv").write_text("".join(lines[i * 500:(i + 1) * 500]))

    reference = Path(run(PreprocessConfig(inputs=[str(inputs)], out=str(tmp_path / "ref"), frequency_threshold=2,
                                          progress=False)))
    out = tmp_path / "out"
    _kill_when(_start(inputs, out, 1), out, "_files/*/parsed.json", 3)              # during parsing
    assert not list(out.glob("datasets/*/_SUCCESS"))
    _kill_when(_start(inputs, out, 2), out, "_files/*/counts", 2)                   # during counting, 2 workers
    assert len(list(out.glob("_files/*/parsed"))) == 20                           # parsing finished, kept
    dataset = Path(run(PreprocessConfig(inputs=[str(inputs)], out=str(out), frequency_threshold=2, progress=False)))
    assert dataset.name == reference.name
    assert_same_files(reference, dataset)
