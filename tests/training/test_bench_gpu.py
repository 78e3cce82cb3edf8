"""benchmarks/bench_gpu.py, the GPU benchmark, kept from rotting where there is no GPU: ``--device cpu`` runs every
phase at tiny sizes through the real CLI (slow: `dlrmflow train` starts torchrun), and its sync counter places
a warning by the Trainer frames it comes from."""

from __future__ import annotations

import json
import math
import sys
import warnings

import pytest

from helpers.paths import CRITEO_10K, REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_gpu  # noqa: E402


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_phase_runs_on_cpu(tmp_path, capsys, monkeypatch):
    """The script's main() in this process (its env phase imports torch, fbgemm_gpu and TorchRec, which this
    process has: a fresh interpreter would import them again, ~5 CPU-seconds); every command and worker it runs is
    a process of its own, as on a GPU. --device cpu hides the GPUs from them through CUDA_VISIBLE_DEVICES, restored
    here afterwards."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = tmp_path / "bench.jsonl"
    returncode = bench_gpu.main(["--device", "cpu", "--out", str(out), "--work", str(tmp_path / "work"),
                                 "--criteo", str(CRITEO_10K)])
    stdout = capsys.readouterr().out
    lines = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
    assert returncode == 0, stdout[-4000:]
    assert [r["phase"] for r in lines] == list(bench_gpu.PHASES)
    assert [json.loads(x) for x in out.read_text().splitlines()] == lines   # --out holds the same lines
    assert all(r["ok"] for r in lines), lines
    r = {x["phase"]: x for x in lines}

    assert r["env"]["torch"] and r["env"]["tbe"]["updated"] and r["env"]["device"]["cores"] >= 1
    parity = r["env"]["parity"]   # CPU against CPU here: the weights copied in, so the two sides agree exactly
    assert parity["fused_rowwise_adagrad_max_diff"] == 0 == parity["dense_grad_max_diff"] < parity["dense_grad_norm"]
    if CRITEO_10K.exists():
        assert math.isfinite(r["quality"]["auc"]) and 0 < r["quality"]["auc"] < 1
        assert r["quality"]["cpu_auc"] == 0.7414 and r["quality"]["steps"] == 10
        resume = r["resume"]   # killed after its first checkpoint (every 2 steps of 12), resumed from the latest to the end
        assert not resume["finished_before_kill"] and resume["resumed_from"] >= max(resume["killed_after_checkpoints"])
        assert resume["steps"] == resume["max_steps"] == 12 and 0 < resume["auc"] < 1
        assert {"manifest.json", "model.pt", "weights.pt"} <= set(resume["bundle"])
    else:
        assert "skipped" in r["quality"] and "skipped" in r["resume"]
    configs = {(64, "fp32"), (64, "bf16")}
    assert {(x["batch"], x["dense"]) for x in r["bare"]["runs"]} == configs
    assert all(x["samples_per_s"] > 0 for x in r["bare"]["runs"])
    assert {(x["batch"], x["dense"]) for x in r["ours"]["runs"]} == configs
    assert all(x["samples_per_s"] > 0 and x["ratio"] > 0 for x in r["ours"]["runs"])
    assert r["sync"]["syncs"] == "n/a on cpu" and all(x["trained_steps"] == 6 for x in r["sync"]["runs"])
    assert r["memory"]["peak"] == "n/a on cpu"
    table = stdout[stdout.rindex("bench_gpu on cpu"):]
    assert "| quality | ok |" in table and "| 64 | bf16 |" in table


SYNC = "called a synchronizing CUDA operation"


class _Pipeline:
    def __init__(self):
        warnings.warn(SYNC)


def _log_window():
    warnings.warn(SYNC)


def _segment(what: str):
    """Stands for Trainer._segment: a sync in what it calls directly is placed by that callee."""
    {"step": lambda: warnings.warn(SYNC), "log": _log_window, "pipeline": _Pipeline}[what]()


def test_sync_counter_places_each_sync_by_the_trainer_frames():
    counter = bench_gpu.SyncCounter()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = counter.show
        for what in ("pipeline", "step", "step", "log"):
            _segment(what)
        warnings.warn(SYNC)                  # outside a segment
        warnings.warn("something else")      # not a sync: not counted
    assert counter.kinds == {"step": 2, "log_point": 1, "segment": 1, "other": 1}
    assert sum(counter.where.values()) == 5
    assert any(k.startswith("log_point: tests/training/test_bench_gpu.py:") and "_log_window" in k
               for k in counter.where)


def test_steady_rate_counts_the_windows_after_the_warmup():
    records = [{"step": 10, "samples_per_s": 1.0}, {"step": 20, "samples_per_s": 100.0},
               {"step": 20, "auc": 0.7}, {"step": 30, "samples_per_s": 300.0}]
    rate, windows = bench_gpu.steady_rate(records, warmup=10, log_every=10, batch=64)
    assert windows == [100, 300] and rate == 150   # all samples / all time of the two windows
    with pytest.raises(RuntimeError, match="warmup"):
        bench_gpu.steady_rate(records[:1], warmup=10, log_every=10, batch=64)
