"""The preprocessing lease of a dataset key (issue 19, section 3): two processes preprocessing one key at once ->
one does the work, the other waits (one line saying for what) and reuses it, the bytes equal a single run's; a
crashed job's lease is taken over; prune leaves the parts a running job's lease records."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common import lease
from preprocessing import PreprocessConfig, run
from preprocessing.job import Job
from preprocessing.work import dataset_lease_uri, file_parts, prune_file_parts, release_dataset_lease, \
    take_dataset_lease
from synthetic.generator import generate
from helpers.datasets import assert_same_files
from helpers.paths import REPO

ROWS = 2000


@pytest.fixture(scope="module")
def days(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("days")
    for d in range(1, 5):
        generate(str(root / f"day{d}"), ROWS, 1, seed=d)
    return [root / f"day{d}" / "part-00000.tsv" for d in range(1, 5)]


def _config(days: list[Path], out: Path) -> PreprocessConfig:
    inputs = [f"train={days[0]}", f"train={days[1]}", f"val={days[2]}", f"test={days[3]}"]
    return PreprocessConfig(inputs=inputs, out=str(out), frequency_threshold=2, progress=False)


_CHILD = """
import os, sys, time
from preprocessing import PreprocessConfig, run, stages
if sys.argv[2] != "-":   # the first comer: encodes once the second is seen waiting (the file argv[2] exists)
    encode = stages.encode_file
    def held_back(*a, **k):
        deadline = time.time() + 60
        while not os.path.exists(sys.argv[2]) and time.time() < deadline:
            time.sleep(0.05)
        return encode(*a, **k)
    stages.encode_file = held_back
print(run(PreprocessConfig.model_validate_json(sys.argv[1])))
"""


def test_two_processes_preprocessing_one_key_one_works_the_other_waits_and_reuses(days, tmp_path):
    config = _config(days, tmp_path / "store")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}

    def start(mode):
        return subprocess.Popen([sys.executable, "-c", _CHILD, config.model_dump_json(), mode], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    go = tmp_path / "go"
    first = start(str(go))
    key = Job.from_config(config).work.root.name
    lease_file = Path(dataset_lease_uri(str(tmp_path / "store"), key))
    while not lease_file.exists():
        assert first.poll() is None, first.communicate()
        time.sleep(0.05)
    second = start("-")
    seen = []
    for line in second.stderr:   # the second comer's one line saying what it waits for, then the first goes on
        seen.append(line)
        if line.startswith("waiting for"):
            break
    go.touch()
    (out1, err1), (out2, err2) = first.communicate(timeout=120), second.communicate(timeout=120)
    err2 = "".join(seen) + err2
    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    assert out1 == out2
    assert "preprocessing 4 input files" in err1 and "preprocessing 4 input files" not in err2
    waiting = [line for line in err2.splitlines() if line.startswith("waiting for")]
    assert len(waiting) == 1 and f"the preprocessing lease of dataset {key}, held by pid {first.pid}" in waiting[0]
    assert "was completed by another run meanwhile, reusing it" in err2
    assert not (tmp_path / "store" / "_work").exists()   # work folder and lease gone

    single = Path(run(_config(days, tmp_path / "single")))
    assert_same_files(single, Path(out1.strip()))


def test_a_crashed_jobs_lease_is_taken_over(days, tmp_path):
    config, said = _config(days, tmp_path / "store"), []
    key = Job.from_config(config).work.root.name
    lease.acquire(dataset_lease_uri(config.out, key), "crashed job", "preprocessing lease", key, 0, stale_s=0.3)
    from preprocessing import Preprocessing

    dataset = Preprocessing(config).run(say=said.append)
    assert any("took over the preprocessing lease" in s and "crashed job" in s for s in said)
    assert (Path(dataset) / "_SUCCESS").exists()


def test_prune_keeps_the_parts_a_running_job_uses(days, tmp_path):
    store = tmp_path / "store"
    run(_config(days, store))
    assert file_parts(str(store)) == sorted(str(d) for d in days)
    job = Job.from_config(PreprocessConfig(inputs=[f"train={days[1]}", f"test={days[2]}"], out=str(store),
                                           progress=False))
    said = []
    held = take_dataset_lease(str(store), job.work.root.name, job.parts)   # a job running on days 2 and 3
    try:
        removed = prune_file_parts(str(store), lambda uri: True, say=said.append)
    finally:
        release_dataset_lease(held, str(store))
    kept = {str(days[1]), str(days[2])}
    assert removed == sorted(str(d) for d in days if str(d) not in kept)
    assert file_parts(str(store)) == sorted(kept)
    assert len([s for s in said if "a running preprocessing job uses them" in s]) == 2
    assert not (store / "_store.lease").exists()
