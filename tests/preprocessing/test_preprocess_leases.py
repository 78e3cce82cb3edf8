"""The preprocessing lease of a dataset key (issue 19, section 3): two processes preprocessing one key at once ->
one does the work, the other waits (one line saying for what) and reuses it, the bytes equal a single run's; a
crashed job's lease is taken over; prune leaves the parts a running job's lease records. The parse lease of a
file: two windows (two keys) that share files parse each of them once, at once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from common import lease
from preprocessing import Preprocessing, PreprocessConfig, run, stages
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


def test_two_windows_sharing_files_at_once_parse_each_file_once(days, tmp_path, monkeypatch):
    """The simulated month (benchmarks/month.py): a backfill and a nightly run of one model started together
    (two windows, two dataset keys) both parsed their shared days, and one failed reading counts the other had
    just replaced. Now the second waits for the first's parse of a shared file, and uses it."""
    def config(first: int, out: Path) -> PreprocessConfig:
        inputs = [f"train={days[first]}", f"val={days[first + 1]}", f"test={days[first + 2]}"]
        return PreprocessConfig(inputs=inputs, out=str(out), frequency_threshold=2, progress=False, workers=2)

    store, shared = tmp_path / "store", str(days[1])
    parsed, seen_waiting, said = [], threading.Event(), []
    parse = stages._parse

    def held_back(job, i, progress=None):   # the shared file's parse lasts until the other job waits for it
        parsed.append(job.inputs[i].uri)
        if job.inputs[i].uri == shared:
            seen_waiting.wait(60)
        return parse(job, i, progress)

    def say(message: str) -> None:
        said.append(message)
        if message.startswith(f"waiting for the parse lease of input file {shared}, held by "):
            seen_waiting.set()

    monkeypatch.setattr(stages, "_parse", held_back)
    out, errors = {}, []

    def job(first: int) -> None:
        try:
            out[first] = Preprocessing(config(first, store)).run(say=say)
        except Exception as e:  # noqa: BLE001  (the test reports it)
            errors.append(e)

    threads = [threading.Thread(target=job, args=(first,)) for first in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and seen_waiting.is_set(), (errors, said)
    assert Counter(parsed) == Counter(str(d) for d in days)   # every file once, the shared ones too
    for first in (0, 1):
        assert_same_files(Path(run(config(first, tmp_path / f"single{first}"))), Path(out[first]))
    assert not list(store.glob("_files/*/parse.lease"))
