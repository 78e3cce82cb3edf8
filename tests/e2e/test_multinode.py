"""Multi-node training on one machine: two torchrun launchers (`dlrmflow train --launcher.nnodes 2 --launcher.node-rank K`)
meeting at a c10d rendezvous on 127.0.0.1, exactly as two real nodes would, give the same losses,
metrics and parameters as one node running both ranks (`--nproc 2`).

The planner is topology-aware (2 nodes x 1 rank is a different topology from 1 node x 2 ranks, so it
may pick other shardings); the test pins the plan with sharding constraints so the two runs compute
the same thing, and checks that the multi-node run did see 2 nodes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from helpers.datasets import write_dataset
from helpers.paths import REPO
from helpers.processes import until
from helpers.runs import checkpoint_tensors, metrics

PLAN = {"t_c0": "row_wise", "t_c1": "table_wise", "t_c2": "data_parallel", "t_c3": "column_wise"}
COMMON = ["--set", "data.batch_size=128", "--set", "log_every=1", "--set", "epochs=1", "--set", "pg_timeout_s=60",
          "--set", "sharding.constraints=" + json.dumps({t: {"sharding_types": [s]} for t, s in PLAN.items()})]
TIMEOUT = 150


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(dataset, run, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "flows.cli", "train", "--dataset", str(dataset), "--run", str(run), *COMMON, *args]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(procs: dict[str, subprocess.Popen]) -> dict[str, str]:
    out = {}
    try:
        for name, p in procs.items():
            out[name] = p.communicate(timeout=TIMEOUT)[0]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    for name, p in procs.items():
        assert p.returncode == 0, f"{name} failed ({p.returncode}):\n{out.get(name, '')[-4000:]}"
    return out


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 30)
def test_two_nodes_equal_one_node(tmp_path, warm_launcher):
    ds = write_dataset(tmp_path / "ds", {"train": 512, "val": 128})
    # the three torchruns fork from this worker's warm launcher (helpers/warm_launcher.py) once it is up, instead of
    # each importing torch and TorchRec beside its own imports (~6 CPU-seconds each, ~15 s of wall on 2 cores)
    until(warm_launcher.exists, 60, "the warm launcher's socket", every=0.2)
    single, multi = tmp_path / "single", tmp_path / "multi"
    endpoint = f"127.0.0.1:{_free_port()}"
    node = ["--nproc", "1", "--launcher.nnodes", "2", "--launcher.rdzv-endpoint", endpoint]
    # all three launchers at once: the single-node run and both "nodes" (which share the run folder,
    # as nodes share an S3 prefix or a network file system)
    out = _finish({"single": _start(ds, single, "--nproc", "2"),
                   "node0": _start(ds, multi, *node, "--launcher.node-rank", "0"),
                   "node1": _start(ds, multi, *node, "--launcher.node-rank", "1")})

    assert "Sharding plan: 2 ranks (1 node(s) x 2)" in (single / "plan.txt").read_text()
    assert "Sharding plan: 2 ranks (2 node(s) x 1)" in (multi / "plan.txt").read_text()
    assert "Sharding plan: 2 ranks (2 node(s) x 1)" in out["node0"] + out["node1"]  # rank 0 lives on one of them
    for table, kind in PLAN.items():
        for run in (single, multi):
            assert any(line.startswith(table) and kind in line for line in (run / "plan.txt").read_text().splitlines())

    strip = lambda run: [{k: v for k, v in m.items() if k != "samples_per_s"} for m in metrics(run)]
    a, b = strip(single), strip(multi)
    assert [m["step"] for m in a if "loss" in m] == [1, 2, 3, 4]
    assert len(a) == len(b)
    for ma, mb in zip(a, b):
        assert ma.keys() == mb.keys()
        for k, v in ma.items():
            assert mb[k] == (pytest.approx(v, rel=1e-6, abs=1e-7) if isinstance(v, float) else v), (ma, mb)
    assert any("auc" in m for m in b)

    pa, pb = checkpoint_tensors(single, 4, tmp_path), checkpoint_tensors(multi, 4, tmp_path)
    assert pa.keys() == pb.keys() and any("embedding_bags" in k for k in pa)
    for k in pa:
        torch.testing.assert_close(pb[k], pa[k], rtol=1e-6, atol=1e-7, msg=k)
