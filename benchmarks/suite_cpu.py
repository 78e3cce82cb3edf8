"""Where the test suite's time and CPU go: runs pytest as `make test` does (three xdist workers, loadgroup) while a
thread samples /proc every half second, then prints the CPU-seconds of the whole run by kind of process (pytest
workers, rank jobs warm or plain, Prefect servers and flow runs, commands, ...), the busiest tests by wall time and
by their worker's own CPU, each worker's busy time, and the machine's busy cores minute by minute.

    .venv/bin/python benchmarks/suite_cpu.py [--workers 3] [--out /tmp/suite-cpu] [-- PYTEST-ARGS]

The same file is the pytest plugin that records each test's start, end and worker CPU (``-p suite_cpu``). A process
that lives less than the sampling period may be missed (a few seconds in all); a forked process is counted under
the command line of its parent (a warm launcher's jobs show as ``warm_launcher.py --serve``). Measure on a quiet
machine: other load slows the suite but does not enter these CPU-seconds.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ENV_OUT = "SUITE_CPU_OUT"
TICK = os.sysconf("SC_CLK_TCK")
KINDS = (   # the first pattern found in a process's command line names its kind
    ("pytest worker", "exec(eval(sys.stdin"), ("pytest", "-m pytest"),
    ("warm launcher: jobs", "warm_launcher.py --serve"), ("warm launcher: clients", "warm_launcher.py"),
    ("rank jobs: Slurm", "--rdzv-backend c10d"), ("rank jobs: plain", "training.launchers.torchrun"),
    ("rank jobs: plain", "bin/torchrun"), ("Prefect server", "prefect server start"),
    ("Prefect harness server", "uvicorn"), ("Prefect flow runs of `serve`", "prefect.engine"),
    ("`dlrmflow serve`", "flows serve"), ("commands (`dlrmflow`, `python -m flows`)", "flows"),
    ("commands (`dlrmflow`, `python -m flows`)", "bin/dlrmflow"), ("moto S3", "moto_server"), ("Dask", "dask"),
    ("Chromium", "chrom"), ("Slurm", "slurm"), ("export child", "training.export"), ("benchmarks", "benchmarks/"),
)


# ---- the pytest plugin (in each worker) -----------------------------------------------------------------------------
def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pytest_configure(config):
    out = os.environ.get(ENV_OUT)
    if out:
        config.pluginmanager.register(_Recorder(Path(out)), "suite_cpu_recorder")


class _Recorder:
    def __init__(self, out: Path):
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.file = open(out / f"tests-{self.worker}.jsonl", "a", buffering=1)   # noqa: SIM115 (for the session)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):   # noqa: ARG002 (pytest's hook signature)
        t0, c0 = time.time(), _cpu()
        try:
            return (yield)
        finally:
            self.file.write(json.dumps({"test": item.nodeid.split("@")[0], "worker": self.worker, "start": t0,
                                        "end": time.time(), "cpu": _cpu() - c0}) + "\n")


# ---- the sampler and the report (the command) -----------------------------------------------------------------------
def _machine_busy() -> float:
    """The machine's CPU-seconds spent busy since boot (/proc/stat: all but idle and iowait)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICK


def _sample(seen: dict, stop: threading.Event, me: int) -> None:
    timeline = seen.setdefault("timeline", [])   # (seconds, the machine's busy CPU-seconds): how busy the cores were
    while not stop.is_set():
        now = time.time()
        if not timeline or now - timeline[-1][0] >= 10:
            timeline.append((now, _machine_busy()))
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                cpu, started = (int(fields[11]) + int(fields[12])) / TICK, int(fields[19])
                entry = seen.get((name, started))
                if entry is None or entry["reads"] < 3:   # a fork shows its parent's command line until it execs
                    command = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    entry = seen.setdefault((name, started), {"first": now, "cpu0": cpu, "reads": 0,
                                                              "pid": int(name), "ppid": int(fields[1])})
                    entry["command"], entry["reads"] = command or entry.get("command", ""), entry["reads"] + 1
            except (OSError, IndexError, ValueError):
                continue
            entry["cpu"] = cpu
        stop.wait(0.5)


def kind(command: str) -> str:
    """The kind of process ``command`` (its command line) is: KINDS' first match, else its program's name."""
    for name, pattern in KINDS:
        if pattern in command:
            return name
    return "other: " + (command.split(" ", 1)[0].rsplit("/", 1)[-1] or "(kernel)")


def _ours(seen: dict, root: int) -> list[dict]:
    """The processes of the run: ``root`` (pytest) and its descendants, and the processes of Slurm jobs (under a
    ``slurmstepd``: the suite's cluster); not the rest of the machine."""
    entries = [e for key, e in seen.items() if key != "timeline"]
    parent = {e["pid"]: e for e in sorted(entries, key=lambda e: e["first"])}   # the latest of a reused pid

    def belongs(entry: dict) -> bool:
        for _ in range(64):
            if entry["pid"] == root or "slurmstepd" in entry["command"]:
                return True
            entry = parent.get(entry["ppid"])
            if entry is None:
                return False
        return False

    return [e for e in entries if belongs(e)]


def report(seen: dict, root: int, started: float, out: Path, wall: float) -> dict:
    """The summary of one run: CPU-seconds by kind, the slowest tests, each worker's busy time (also in
    ``out/summary.json``; each process's CPU and command line in ``out/processes.jsonl``)."""
    by_kind: dict[str, float] = collections.defaultdict(float)
    with open(out / "processes.jsonl", "w") as processes:
        for entry in _ours(seen, root):
            existed = entry["first"] - started < 0.6   # already running: count only what it used during the run
            used = entry["cpu"] - (entry["cpu0"] if existed else 0)
            by_kind[kind(entry["command"])] += used
            processes.write(json.dumps({"pid": entry["pid"], "ppid": entry["ppid"], "first": entry["first"],
                                        "cpu": round(used, 2), "kind": kind(entry["command"]),
                                        "command": entry["command"][:300]}) + "\n")
    tests = [json.loads(line) for f in sorted(out.glob("tests-*.jsonl")) for line in f.read_text().splitlines()]
    workers = collections.defaultdict(float)
    for t in tests:
        workers[t["worker"]] += t["end"] - t["start"]
    summary = {"wall_s": round(wall, 1), "cpu_s": round(sum(by_kind.values()), 1), "tests": len(tests),
               "cpu_by_kind": {k: round(v, 1) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]) if v >= 0.5},
               "busiest_by_wall": [(t["test"], round(t["end"] - t["start"], 1)) for t in
                                   sorted(tests, key=lambda t: t["start"] - t["end"])[:25]],
               "busiest_by_worker_cpu": [(t["test"], round(t["cpu"], 1)) for t in
                                         sorted(tests, key=lambda t: -t["cpu"])[:15]],
               "worker_busy_s": {w: round(s, 1) for w, s in sorted(workers.items())},
               "cores_busy_by_minute": _cores_busy_by_minute(seen.get("timeline", []), started)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _cores_busy_by_minute(timeline: list, started: float) -> list[float]:
    """The machine's busy cores averaged over each minute of the run (all its processes, not only the suite's)."""
    minutes: dict[int, list] = collections.defaultdict(list)
    for (t0, b0), (t1, b1) in zip(timeline, timeline[1:]):
        minutes[int((t0 - started) // 60)].append(((b1 - b0), t1 - t0))
    return [round(sum(b for b, _ in v) / sum(d for _, d in v), 2) for _, v in sorted(minutes.items())]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=3, help="pytest-xdist workers (make test: 3)")
    p.add_argument("--out", default="/tmp/suite-cpu", help="folder for the per-test records and summary.json")
    p.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (e.g. a test folder)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("tests-*.jsonl"):
        old.unlink()
    env = {**os.environ, ENV_OUT: str(out),
           "PYTHONPATH": os.pathsep.join([str(REPO / "benchmarks"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    seen: dict = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(seen, stop, os.getpid()), daemon=True)
    started = time.time()
    sampler.start()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-n", str(args.workers), "--dist", "loadgroup",
                             "-p", "suite_cpu", "-p", "no:cacheprovider", *args.pytest_args], cwd=REPO, env=env)
    code = proc.wait()
    wall = time.time() - started
    stop.set()
    sampler.join()
    summary = report(seen, proc.pid, started, out, wall)
    print(f"\nsuite: {summary['tests']} tests, {summary['wall_s']:.0f} s wall, {summary['cpu_s']:.0f} CPU-seconds "
          f"(pytest exit {code})")
    for name, cpu in summary["cpu_by_kind"].items():
        print(f"  {cpu:8.1f}  {name}")
    print("busiest tests (wall s):")
    for test, seconds in summary["busiest_by_wall"][:15]:
        print(f"  {seconds:8.1f}  {test}")
    print("worker busy (s):", summary["worker_busy_s"])
    print("cores busy, by minute:", summary["cores_busy_by_minute"])
    return code


if __name__ == "__main__":
    sys.exit(main())
