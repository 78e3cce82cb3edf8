"""A simulated month (issue 19's proof, extended by issue 34's): nights of two models over small drifting synthetic
days, with faults.

Writes ``nights + 6`` drifting synthetic Criteo days (``synthetic.generator.write_days``, one file a day), then
runs each night ``dlrmflow run --date D`` (a subprocess reporting to a Prefect server this script starts, so a
kill -9 is real) for two models that share the inputs and one store: ``long`` (--train-days 6 --min-days 4), then
``short`` (--train-days 3 --min-days 2). The longer window runs first: on the first night a model without history is
unknown to the store's clean-up, which would remove the parts of the days only the other's first window reads
(models.gc keeps what every model's recorded window needs). The input spec is Criteo's with ``I10`` passed through as
is (``transform: identity``), so that a float16 overflow can happen at all. The store lies on a tmpfs of its own
(``WORK/fs``, mounted by this script when it runs as root; else the disk-full faults are left out), so that a disk
can be filled for real.

Injected (the night numbers below are the defaults; ``--at NAME=NIGHT`` moves one, 0 leaves it out; a negative
night counts from the end, -1 being the last; a fault whose night is past ``--nights`` is left out):

- bad days, each in its own night's test day (the windows of the nights after it hold it): all labels 0
  (``labels_zero``, 6: a bad label day in the middle of the later windows), a byte that is not UTF-8 (``non_utf8``,
  9), a file cut mid-line (``cut_mid_line``, 13), 5% of the usual rows (``few_rows``, 20), I10 values of 70000 >
  65504, float16's largest (``overflow``, 27). The data gate quarantines each by itself (its verdicts in
  models/NAME/days.jsonl): the first and the fourth by their checks, the others, whose parse fails on their own
  file, with the verdict "its parse failed: ..." (5d16de3); the nights after train without them on their own. Where
  the gate made no verdict on a day whose parse failed, the operator quarantines it after its night (``dlrmflow days
  --model M quarantine D --why ...``, both models) so that the month goes on, and a claim fails;
- kill -9 of the run's process group during preprocessing (``kill_preprocess``: long, 3) and training
  (``kill_train``: short, 4), and after each promotion write (``$DLRMFLOW_CRASH_AFTER``: ``crash_bundle`` short 2,
  ``crash_champion`` long 8, ``crash_history`` short 15, ``crash_prune`` long 22; re-armed each night until it fires
  in a promotion). Each killed night is run again;
- an outage (``outage``, 10: nothing runs), then on night 11 short's backfill of night 10 and its nightly run at once,
  then long's backfill and night;
- a spec with hostile feature names (``hostile``, 5): a third model ``hostile`` runs the night with the Criteo
  spec whose C1, C2 and C3 are named ``../../../../month-escape-4``, ``../../../../../../../../month-escape-8`` and
  an absolute path in the work folder's parent (its own copy of the window's days as inputs); nothing may be
  written outside the store (a listing of the work folder's parent before and after, and no ``month-escape*``
  file there, under /tmp or /);
- two runs of one night at once (``twice``, 7: two ``dlrmflow run`` of short's night started together);
- disk full at a checkpoint (``disk_checkpoint``, 8: short; the store's tmpfs filled, leaving room for the
  history's rewrite only, once its run has written its config and before its first checkpoint) and at the export of
  a new champion's bundle (``disk_export``, 12: short, filled when its champion's scoring begins; re-armed each
  night until an export meets it). The filler is removed after the night fails, and the night is run again;
- a corrupted checkpoint of the champion (``corrupt``, 12: long; 16 bytes of the largest file of the step that
  champion.json names inverted before the night). The fix the error gives: the file restored from a backup, the
  night run again;
- S3 lost mid-night (``s3``, -3: the last night but two): a third model ``remote`` whose store is a bucket on a moto
  server this script starts (its own clean copies of the days as inputs) runs the night before (its first night)
  and this night, on which the server is frozen (SIGSTOP: it accepts connections and never answers) once a
  checkpoint of the night's run is complete on S3; the run must end in one line naming the store (``store
  's3://...' not answering``, no rank traceback) within 3 x ``common.s3.s3_bound()`` of the DLRMFLOW_S3_*
  settings (connect 3 s, read 5 s, 1 retry here: 11 s a call) after the freeze, leaving no process; the server is
  then let go on
  (SIGCONT; also when the run is still alive ``HANG_S`` after the freeze: hung, its stacks dumped with py-spy when
  installed) and the night run again;
- the store moved (``move``, -2: before the last night but one): the store's folder renamed (same filesystem) and
  every later run given the new path.

The data gate's cases (issue 46 §1; ``docs/nightly.md``, "The data gate"):

- in the shared days, judged by ``long`` and ``short`` as the bad days above: every row ingested 1.9x (90% of the
  rows twice, ``duplicates``, 17: quarantined by the duplicates check alone), then ``chmod 640`` of the newest day the
  gate quarantined by its checks after its night (``chmod``, 17): the verdict stands (no new verdict line, no new
  parse, the later windows leave it out); the labels permuted among the rows (``permuted``, 24: the signal gone, the
  marginals kept; no check can see it, so it is no bad day of the claims above): its night promotes no challenger, and
  no promoted line of any model has an AUC not above the floor or a normalized entropy not below ``max_ne``;
- three models of their own (their own copies of the clean days, ``gate-logs/MODEL``; ``--train-days`` 3, 3 and 7):
  ``fresh`` (``first_clicks``, 16; 2 nights): the oldest day of its first window clicks at 3x the rate: that day is
  quarantined, the other days accepted, both nights decide; ``shift`` (``shift``, 18; 4 nights): the click rate
  doubled for good from that night's day: the first 3 nights stop at the gate (each with its history line), the
  third says ``a new normal since DATE``, the script runs ``dlrmflow days --model shift accept-shift DATE`` once and
  the fourth night trains on the new normal; ``drift`` (``drift``, 25, at least 2; 2 nights): the click rate falls
  20% a day from that night's day on: the first night's day (0.8x) is accepted, the second's (0.64x, inside the
  short band of +-50%) is quarantined by the long reference (``label_rate_long``). A click rate is changed by
  turning random negatives into positives or back (the features as written).

After each run: any process it started still alive 15 s after it ended (by a tag in its environment: ranks,
torchrun, servers, export children) is an orphan, recorded and killed. After each night: the store's size (bytes of
its files, by top-level folder), each model's history and champion (its bundle verified against its manifest and the
run, and scored on the night's raw rows). A thread records every parse stored under ``_files/``. At the end, the
claims (the script exits 1 when one fails); prints the tables for benchmarks/RESULTS.md, writes ``results.json`` and
``store-size.png`` in the work folder, and a copy of the store (``store-final``) before the tmpfs is unmounted.

usage: python benchmarks/month.py [--nights 30] [--rows-per-day 4000] [--keep-nights 7] [--work DIR] [--at NAME=N ...]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this repository's packages, whatever the install

MODELS = {"long": 6, "short": 3}   # name -> train_days, in the order they run each night (see the module doc)
MIN_DAYS = {"long": 4, "short": 2}   # a window may lose two bad days (long) or one (short)
START = dt.date(2026, 10, 1)
LEAD = max(MODELS.values())        # days before the first night
AT = {   # what happens on which night (see the module doc); --at NAME=N overrides, 0 leaves out, -k counts from the end
    "labels_zero": 6, "non_utf8": 9, "cut_mid_line": 13, "few_rows": 20, "overflow": 27,
    "kill_preprocess": 3, "kill_train": 4,
    "crash_bundle": 2, "crash_champion": 8, "crash_history": 15, "crash_prune": 22,
    "outage": 10, "hostile": 5, "twice": 7, "disk_checkpoint": 8, "disk_export": 12, "corrupt": 12,
    "s3": -3, "move": -2,
    "duplicates": 17, "chmod": 17, "permuted": 24, "first_clicks": 16, "shift": 18, "drift": 25,
}
DATA_FAULTS = ("labels_zero", "non_utf8", "cut_mid_line", "few_rows", "overflow", "duplicates")
GATE_FAULTS = {"labels_zero", "few_rows", "duplicates"}   # quarantined by the data gate itself
SILENT_FAULTS = ("permuted",)   # injected into the shared days, invisible to the gate (no bad day of the claims)
GATE_MODELS = {"fresh": ("first_clicks", 2), "shift": ("shift", 4), "drift": ("drift", 2)}   # model -> (event, nights)
TRAIN_DAYS = {**MODELS, "drift": 7}   # drift: more than reference_days (7) accepted days before its caught day
FIRST_CLICKS, SHIFT_CLICKS, DRIFT_DAILY = 3.0, 2.0, 0.8   # fresh's first day, shift's new normal, drift's daily factor
DUPLICATED = 0.9   # the share of a day's rows ingested twice (1.9x the rows)
PARSE_FAULTS = {"non_utf8", "cut_mid_line", "overflow"}   # their parse fails: the gate quarantines the day (5d16de3)
KILLS = {"kill_preprocess": ("long", "preprocess"), "kill_train": ("short", "train")}
CRASHES = {"crash_bundle": ("short", "bundle"), "crash_champion": ("long", "champion"),
           "crash_history": ("short", "history"), "crash_prune": ("long", "prune")}
OPS = {"disk_checkpoint": "short", "disk_export": "short", "corrupt": "long", "twice": "short"}
OVERFLOW_FEATURE, OVERFLOW_VALUE = "I10", 70000
UTF8_FEATURE = "C5"
FAULT_NAMES = {   # what the night's history line and log must say: {date} the day, {path} its file, {line} the line
    "labels_zero": ["day {date}: label_rate 0 outside", "day {date}: min_positives 0 <"],
    "non_utf8": ["{path}: line {line}, column " + UTF8_FEATURE, "not UTF-8"],
    "cut_mid_line": ["{path}: line "],
    "few_rows": ["day {date}: rows "],
    "overflow": ["{path}", repr(OVERFLOW_FEATURE), str(OVERFLOW_VALUE), "65504"],
    "duplicates": ["day {date}: duplicates "],
}
PROMOTING = ("first", "promoted")
DECIDED = ("first", "promoted", "kept")
KILL_NAMES = {   # what the re-run of a killed night logs about what the kill left
    "preprocess": "took over the preprocessing lease",
    "train": "resuming training from the checkpoint at step",
    "promotion": "took over the promotion lock",
}
HOSTILE_NAMES = {"C1": "../../../../month-escape-4", "C2": "../../../../../../../../month-escape-8"}  # C3: absolute
OWN_LOGS = ("out.log", "uptime.log")   # this script's stdout and a load log, when kept beside the work folder
TAG = "DLRMFLOW_MONTH_TAG"   # in the environment of every run: what a run leaves alive is found by it
S3_ENV = {"AWS_ACCESS_KEY_ID": "month-key", "AWS_SECRET_ACCESS_KEY": "month-secret", "AWS_DEFAULT_REGION": "us-east-1",
          "DLRMFLOW_S3_CONNECT_TIMEOUT_S": "3", "DLRMFLOW_S3_READ_TIMEOUT_S": "5", "DLRMFLOW_S3_RETRIES": "1"}
REMOTE = "remote"   # the model on S3
HANG_S = 180.0      # a run still alive this long after the S3 server froze is hung: its stacks dumped, the server let go
BUCKET = "month"


def night_date(n: int) -> dt.date:
    return START + dt.timedelta(days=LEAD + n - 1)


# --- the days and their faults ---------------------------------------------------------------------------------

def day_file(logs: Path, day: dt.date) -> Path:
    return logs / day.isoformat() / "part-00000.tsv"


def inject(path: Path, fault: str) -> tuple[str, dict]:
    """Change the raw day ``path`` in place; returns what was done and the words its names may use ({line})."""
    lines = path.read_bytes().split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    n = len(lines)
    if fault == "labels_zero":
        path.write_bytes(b"".join(b"0" + line[line.index(b"\t"):] + b"\n" for line in lines))
        return f"all {n} labels set to 0", {}
    if fault == "non_utf8":
        k = int(n * 0.4)
        fields = lines[k].split(b"\t")
        column = 1 + 13 + int(UTF8_FEATURE[1:]) - 1   # label, I1..I13, C1..C26
        fields[column] = b"\xff" + fields[column][1:]
        lines[k] = b"\t".join(fields)
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        return f"byte 0xff at the start of {UTF8_FEATURE} on line {k + 1} of {n}", {"line": k + 1}
    if fault == "cut_mid_line":
        k = int(n * 0.6)
        keep = b"".join(line + b"\n" for line in lines[:k]) + lines[k][:len(lines[k]) // 2]
        path.write_bytes(keep)
        return f"cut in the middle of line {k + 1} of {n} ({len(keep)} bytes kept)", {"line": k + 1}
    if fault == "few_rows":
        k = max(1, round(n * 0.05))
        path.write_bytes(b"".join(line + b"\n" for line in lines[:k]))
        return f"{k} of its {n} rows kept (5%)", {}
    if fault == "overflow":
        column = int(OVERFLOW_FEATURE[1:])   # fields: label, I1..I13, C1..C26
        out, changed = [], 0
        for i, line in enumerate(lines):
            fields = line.split(b"\t")
            if i % 50 == 7:
                fields[column] = str(OVERFLOW_VALUE).encode()
                changed += 1
            out.append(b"\t".join(fields) + b"\n")
        path.write_bytes(b"".join(out))
        return f"{OVERFLOW_FEATURE} = {OVERFLOW_VALUE} in {changed} of {n} rows", {}
    if fault == "duplicates":
        k = round(n * DUPLICATED)
        path.write_bytes(b"".join(line + b"\n" + (line + b"\n" if i < k else b"") for i, line in enumerate(lines)))
        return f"{k} of its {n} rows ingested twice ({(n + k) / n:.2g}x the rows)", {}
    if fault == "permuted":
        labels = [line[:line.index(b"\t")] for line in lines]
        random.Random(f"permuted {path.parent.name}").shuffle(labels)
        path.write_bytes(b"".join(y + line[line.index(b"\t"):] + b"\n" for y, line in zip(labels, lines)))
        return f"the {n} labels shuffled among the rows ({sum(y == b'1' for y in labels)} positives kept)", {}
    raise ValueError(fault)


def scale_clicks(path: Path, factor: float, seed: str) -> dict:
    """The raw day ``path``'s click rate times ``factor`` in place: random negatives turned positive (``factor`` > 1)
    or random positives negative (< 1), every feature as written; returns the rows and the rates before and after."""
    lines = path.read_bytes().split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    positive = [line[:line.index(b"\t")] == b"1" for line in lines]
    rate = sum(positive) / len(lines)
    rng = random.Random(seed)
    turn = (factor - 1) * rate / (1 - rate) if factor > 1 else 0.0   # a negative's chance to become positive
    labels = [(rng.random() < factor if factor < 1 else True) if y else rng.random() < turn for y in positive]
    path.write_bytes(b"".join((b"1" if y else b"0") + line[line.index(b"\t"):] + b"\n"
                              for y, line in zip(labels, lines)))
    return {"rows": len(lines), "rate_before": round(rate, 4), "rate_after": round(sum(labels) / len(lines), 4)}


def write_spec(path: Path, renamed: dict[str, str] | None = None) -> None:
    """Criteo's input spec with I10 as is (no log1p): a value above 65504 overflows the float16 numericals;
    ``renamed``: features given other names (the hostile spec)."""
    import feature_spec as fs

    spec = fs.criteo_spec()
    spec.feature_spec[OVERFLOW_FEATURE] = spec.feature_spec[OVERFLOW_FEATURE].model_copy(
        update={"transform": "identity"})
    spec.metadata["name"] = "month"
    if renamed:
        d = spec.model_dump()
        d["feature_spec"] = {renamed.get(k, k): v for k, v in d["feature_spec"].items()}
        d["channel_spec"] = {k: [renamed.get(x, x) for x in v] for k, v in d["channel_spec"].items()}
        d["metadata"]["name"] = "hostile"
        spec = fs.FeatureSpec.model_validate(d)
    path.write_text(fs.to_yaml(spec))


# --- processes -------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(work: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port), "PREFECT_API_URL": api}
    log = open(work / "prefect-server.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the Prefect server exited ({proc.returncode}): see {work / 'prefect-server.log'}")
        try:
            with urllib.request.urlopen(f"{api}/health", timeout=5) as r:
                if r.read().strip() == b"true":
                    return proc, api
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit("the Prefect server did not answer in 180 s")


def stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tagged(value: str) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes whose environment holds ``TAG=value``."""
    want = f"{TAG}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[-1].split()[0] == b"Z":   # a zombie: gone, not yet reaped
                    continue
        except OSError:
            continue
        found.append((int(entry), cmd[:200]))
    return found


class Moto:
    """A moto S3 server with a bucket: the remote model's store."""

    def __init__(self, work: Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(work / "moto-server.log", "w")
        self.proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p",
                                      str(self.port)], stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise SystemExit(f"moto_server did not start: see {work / 'moto-server.log'}")
                time.sleep(0.3)
        self.client().create_bucket(Bucket=BUCKET)
        self.frozen = False

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
                            config=Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}))

    def env(self) -> dict:
        return {**S3_ENV, "AWS_ENDPOINT_URL": self.endpoint}

    def keys(self, prefix: str) -> list[str]:
        out, token = [], None
        client = self.client()
        while True:
            kw = {"Bucket": BUCKET, "Prefix": prefix, **({"ContinuationToken": token} if token else {})}
            page = client.list_objects_v2(**kw)
            out += [o["Key"] for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
        self.frozen = False

    def stop(self) -> None:
        if self.frozen:
            self.thaw()
        stop_group(self.proc)


class Disk:
    """The store's tmpfs (``WORK/fs``) and a filler file beside the store on it."""

    def __init__(self, mount: Path | None):
        self.mount = mount
        self.filler = mount / "filler" if mount else None

    def free(self) -> int:
        st = os.statvfs(self.mount)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int) -> dict:
        """Fill the filesystem but ``leave`` bytes; returns the free space before and after."""
        before = self.free()
        n = before - leave
        if n > 0:
            with open(self.filler, "ab") as f:
                os.posix_fallocate(f.fileno(), f.seek(0, 2), n)
        return {"free_before": before, "free_after": self.free(), "left": leave}

    def clear(self) -> None:
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def listing(root: Path, skip: list[Path]) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` but those under ``skip``: path -> (size, mtime_ns)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = [d for d in dirs if not any(here / d == s or s in (here / d).parents for s in skip)]
        for name in files + dirs:
            p = here / name
            if any(p == s or s in p.parents for s in skip):
                continue
            try:
                st = p.lstat()
            except FileNotFoundError:
                continue
            out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


@dataclass
class Attempt:
    model: str
    date: str
    role: str            # nightly, backfill, re-run, twin, hostile, operator
    rc: int | None = None
    start: float = 0.0
    end: float = 0.0
    killed: str | None = None   # preprocess, train, or the promotion write after which the hook fired
    log: str = ""
    tag: str = ""
    store: str = ""
    orphans: list = field(default_factory=list)   # command lines alive 15 s after the run ended
    event: dict = field(default_factory=dict)      # what was done to it while it ran (a fill, a freeze), and when

    @property
    def wall(self) -> float:
        return self.end - self.start


class Month:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work).resolve()
        self.logs = self.work / "logs"
        self.pristine = self.work / "pristine"   # the faulty days as written (the remote model's inputs)
        self.runlogs = self.work / "run-logs"
        self.fs = self.work / "fs"
        self.store = self.fs / "store"
        self.spec = self.work / "month-spec.yaml"
        self.attempts: list[Attempt] = []
        self.nights: list[dict] = []
        self.faults: dict[str, dict] = {}       # date -> {fault, night, what, words}
        self.ops: list[dict] = []               # the operational faults: what was done, what the runs said
        self.operator: list[dict] = []          # dlrmflow days quarantine calls (where the gate made no verdict)
        self.parse_verdicts: dict = {}          # "model date" -> the gate's verdict on a day whose parse failed
        self.champions: dict[tuple, dict] = {}  # (model, run, step, bundle sha256) -> what was checked
        self.gate: dict = {"days": {}, "nights": [], "accept_shift": [], "chmod": None, "permuted": None}
        self.env: dict = {}
        self.tag = uuid.uuid4().hex[:12]
        self.disk = Disk(None)
        self.moto: Moto | None = None
        self.at = dict(AT)
        for item in args.at or []:
            name, _, n = item.partition("=")
            if name not in AT:
                raise SystemExit(f"--at {item}: no such event (one of {', '.join(AT)})")
            self.at[name] = int(n)
        self.at = {k: (args.nights + 1 + v if v < 0 else v) for k, v in self.at.items()}
        self.at = {k: v for k, v in self.at.items() if 1 <= v <= args.nights}

    def when(self, name: str) -> int | None:
        return self.at.get(name)

    # ---- a run
    def command(self, model: str, date: dt.date, store: str | None = None, inputs: Path | None = None,
                spec: Path | None = None) -> list[str]:
        days = TRAIN_DAYS.get(model, 3)
        return [sys.executable, "-m", "flows", "run", "--date", date.isoformat(),
                "--input", f"{inputs or self.logs}/{{date}}/part-*", "--spec", str(spec or self.spec),
                "--store", str(store or self.store), "--model", model, "--train-days", str(days),
                "--min-days", str(MIN_DAYS.get(model, 2)), "--nproc", "1",
                "--frequency-threshold", "10", "--epochs", "1", "--data.batch-size", "256",
                "--checkpoint-every", "10", "--keep-checkpoints", "2", "--gc.keep-nights", str(self.args.keep_nights)]

    def start(self, model: str, date: dt.date, role: str, crash: str | None = None, command: list[str] | None = None,
              env: dict | None = None, store: str | None = None) -> tuple[Attempt, subprocess.Popen]:
        attempt = Attempt(model, date.isoformat(), role, store=str(store or self.store))
        n = sum(a.date == attempt.date and a.model == model for a in self.attempts)
        attempt.log = str(self.runlogs / f"{date}-{model}-{role}-{n}.log")
        attempt.tag = f"{self.tag}#{len(self.attempts)}"
        env = {**self.env, **(env or {}), TAG: attempt.tag}
        if crash:
            env["DLRMFLOW_CRASH_AFTER"] = crash
        attempt.start = time.time()
        with open(attempt.log, "w") as log:
            proc = subprocess.Popen(command or self.command(model, date, store), env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.attempts.append(attempt)
        return attempt, proc

    def finish(self, attempt: Attempt, proc: subprocess.Popen, kill: str | None = None, poll=None) -> Attempt:
        while proc.poll() is None:
            if kill and (why := self.kill_point(kill, attempt)):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                attempt.killed = f"{kill} ({why})"
                break
            if poll is not None:
                poll(attempt)
            time.sleep(0.05)
        attempt.rc, attempt.end = proc.returncode, time.time()
        # what the run left alive: its processes (any group) must end with it
        deadline = time.time() + 15
        while (left := tagged(attempt.tag)) and time.time() < deadline:
            time.sleep(0.25)
        attempt.orphans = [cmd for _, cmd in left]
        for pid, _ in left:   # this script's own runs' processes, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stop_group(proc)
        if attempt.rc == -signal.SIGKILL and not attempt.killed:
            attempt.killed = "promotion"
        return attempt

    def run(self, model: str, date: dt.date, role: str = "nightly", kill: str | None = None,
            crash: str | None = None, poll=None, **kw) -> Attempt:
        attempt, proc = self.start(model, date, role, crash, **kw)
        return self.finish(attempt, proc, kill, poll)

    def kill_point(self, kill: str, attempt: Attempt) -> str | None:
        """Why now is a moment to kill ``attempt`` in stage ``kill`` (None: not yet)."""
        if kill == "preprocess":   # its dataset lease is held and the new day's parse is stored
            leases = list((self.store / "_work").glob("*.lease"))
            day = str(day_file(self.logs, dt.date.fromisoformat(attempt.date)))
            parsed = day in ParseWatch.uris(self.store)
            return f"lease {leases[0].name} held, {attempt.date} parsed" if leases and parsed else None
        if kill == "train":   # its first checkpoint is complete, training goes on
            for run in self.store.glob(f"runs/{attempt.model}-{attempt.date}-*"):
                done = list(run.glob("checkpoints/*/_COMPLETE"))
                if done and not (run / "_SUCCESS").exists():
                    return f"checkpoint {done[0].parent.name} of {run.name} complete, no _SUCCESS"
        return None

    def operator_quarantine(self, model: str, day: dt.date, why: str) -> Attempt:
        cmd = [sys.executable, "-m", "flows", "days", "--store", str(self.store), "--model", model, "quarantine",
               day.isoformat(), "--why", why, "--by", "month operator"]
        a = self.run(model, day, role="operator", command=cmd)
        self.operator.append({"model": model, "day": day.isoformat(), "rc": a.rc, "why": why,
                              "said": _last_lines(a.log, 1)})
        return a

    # ---- the store
    def history(self, model: str, store: Path | None = None) -> list[dict]:
        path = (store or self.store) / "models" / model / "history.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def verdicts(self, model: str) -> list[dict]:
        path = self.store / "models" / model / "days.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def champion(self, model: str) -> dict | None:
        path = self.store / "models" / model / "champion.json"
        return json.loads(path.read_text()) if path.exists() else None

    def located(self, uri: str | None) -> str | None:
        """A location champion.json records, as a path: store-relative ones joined to the store."""
        if uri is None or uri.startswith("/") or "://" in uri:
            return uri
        return str(self.store / uri)

    def sizes(self) -> dict[str, int]:
        out = collections.Counter()
        for root, _, files in os.walk(self.store):
            top = Path(root).relative_to(self.store).parts[:1]
            for f in files:
                try:
                    out[top[0] if top else "."] += os.lstat(os.path.join(root, f)).st_size
                except FileNotFoundError:
                    pass
        return dict(out)

    def check_champion(self, model: str, date: dt.date) -> dict | None:
        """The champion's bundle verified (manifest, run and step) and scored on ``date``'s raw rows (once per
        champion; a bundle that changed since, or a store moved since, is verified again)."""
        from models.config import ScoreConfig
        from models.scoring import score
        from training.export import verify_bundle

        c = self.champion(model)
        if c is None:
            return None
        key = (model, c["run"], c["step"], c.get("bundle_sha256"), str(self.store))
        if key in self.champions:
            return self.champions[key]
        result = {"model": model, "run": Path(c["run"]).name, "step": c["step"], "date": c["date"], "night": str(date),
                  "store": self.store.name, "recorded": {"run": c["run"], "bundle": c.get("bundle")}}
        try:
            run, bundle = self.located(c["run"]), self.located(c.get("bundle"))
            for what, p in (("run", run), ("bundle", bundle)):
                if p and not Path(p).exists():
                    raise FileNotFoundError(f"champion.json's {what} {p} does not exist")
            sha = verify_bundle(bundle, run, c["step"])
            result["verified"] = sha == c["bundle_sha256"]
            if not result["verified"]:
                result["error"] = f"manifest sha256 {sha} != champion.json's {c['bundle_sha256']}"
            day = day_file(self.logs, date)
            if day.exists():
                with tempfile.TemporaryDirectory() as tmp:
                    summary = score(ScoreConfig(bundle=bundle, inputs=[str(day)], out=f"{tmp}/s.parquet",
                                                progress=False), on_line=lambda _: None)
                result["scored_rows"], result["auc"] = summary["rows"], round(summary.get("auc", float("nan")), 4)
        except Exception as e:   # noqa: BLE001  (a claim, reported)
            result["verified"], result["error"] = False, f"{type(e).__name__}: {e}"
        self.champions[key] = result
        return result


def _last_lines(log: str, k: int = 3) -> str:
    lines = [x for x in Path(log).read_text(errors="replace").splitlines() if x.strip()]
    return " / ".join(lines[-k:])[:600]


def _rank_traceback(log: str) -> bool:
    """Whether a rank died of an exception (its traceback relayed by torchrun: ``ProcessRaisedException``, "Process N
    terminated with the following error", or a ``[rank N]`` line's traceback), not of its one line and an exit code
    (torchrun's own ``ChildFailedError`` traceback, relayed whenever a rank fails, is not a rank's)."""
    text = Path(log).read_text(errors="replace")
    return ("ProcessRaisedException" in text or "terminated with the following error" in text
            or any("[rank" in x and "Traceback (most recent call last)" in x for x in text.splitlines()))


def s3_bound_here() -> float:
    """``common.s3.s3_bound()`` of this script's DLRMFLOW_S3_* settings (S3_ENV): one call's most seconds."""
    from unittest import mock

    from common.s3 import s3_bound, s3_client_config

    with mock.patch.dict(os.environ, S3_ENV):
        return s3_bound(s3_client_config())


def _error_line(log: str) -> str | None:
    """The command's error (``error: ...`` and the lines after it: a rank's failure shows its last lines), else the
    last ERROR log line's message."""
    lines = Path(log).read_text(errors="replace").splitlines()
    found = [i for i, x in enumerate(lines) if x.startswith("error: ")]
    if found:   # the error line, the failing rank's own error lines (else its last line), not its other lines
        block = [x.strip() for x in lines[found[-1]:] if x.strip()]
        picked = [block[0]] + [x for x in block[1:] if x.startswith("error (rank")]
        return " / ".join(picked if len(picked) > 1 else block[:1] + block[-1:][:len(block) - 1])[:1500]
    found = [x for x in lines if "| ERROR" in x]
    return found[-1].split(" - ", 1)[-1] if found else None


class ParseWatch(threading.Thread):
    """Every parse stored under ``<store>/_files/``: each new ``parsed.json`` (its input URI, inode and mtime: a
    removal renames its folder first, which keeps both). ``store`` may change (the store moved)."""

    def __init__(self, store: Path):
        super().__init__(daemon=True)
        self.store, self.seen, self.stop = store, {}, threading.Event()

    @staticmethod
    def uris(store: Path) -> set[str]:
        """The input URIs whose parse is stored now."""
        found = set()
        for meta in store.glob("_files/*/parsed.json"):
            try:
                found.add(json.loads((meta.parent / "entry.json").read_text())["uri"])
            except (OSError, ValueError, KeyError):
                pass
        return found

    def scan(self) -> None:
        for meta in self.store.glob("_files/*/parsed.json"):
            try:
                st = meta.stat()
                uri = json.loads((meta.parent / "entry.json").read_text())["uri"]
                self.seen[(uri, st.st_ino, st.st_mtime_ns)] = uri
            except (OSError, ValueError, KeyError):
                pass

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.scan()

    def counts(self) -> collections.Counter:
        self.scan()
        return collections.Counter(self.seen.values())


# --- the faults that are not in the data ---------------------------------------------------------------------

def hostile_night(m: Month, n: int, day: dt.date) -> dict:
    """Model ``hostile``'s night with the hostile spec: what it did and whether anything landed outside the store."""
    outside = m.work.parent
    names = dict(HOSTILE_NAMES, C3=str(outside / "month-escape-abs"))
    spec = m.work / "hostile-spec.yaml"
    write_spec(spec, names)
    inputs = m.work / "hostile-logs"
    for k in range(MODELS["short"], -1, -1):
        d = day - dt.timedelta(days=k)
        day_file(inputs, d).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(day_file(m.logs, d), day_file(inputs, d))
    skip = [m.fs, m.work / "prefect", m.runlogs, m.work / "prefect-server.log", m.work / "moto-server.log"]
    before = listing(outside, skip)
    a = m.run("hostile", day, role="hostile", command=m.command("hostile", day, inputs=inputs, spec=spec))
    after = listing(outside, skip)
    new = sorted(set(after) - set(before))
    changed = sorted(p for p in set(after) & set(before) if after[p] != before[p])
    escaped = [str(p) for p in outside.rglob("month-escape*") if m.fs not in p.parents] + \
        [str(p) for root in (Path("/tmp"), Path("/")) for p in root.glob("month-escape*")]
    text = Path(a.log).read_text(errors="replace")
    result = {"night": n, "date": day.isoformat(), "rc": a.rc, "wall_s": round(a.wall), "names": names,
              "new_outside": new[:20], "changed_outside": changed[:20], "escaped": escaped,
              "traceback": "Traceback" in text, "error": _error_line(a.log),
              "decision": next((e.get("decision") for e in m.history("hostile")), None),
              "files_named": sorted({p.name for p in m.store.rglob("*") if "month-escape" in p.name})[:8]}
    print(f"night {n} {day}: hostile spec: rc {a.rc} in {a.wall:.0f} s; outside the store: {len(new)} new, "
          f"{len(changed)} changed; month-escape* anywhere: {escaped or 'none'}", flush=True)
    return result


def corrupt_champion(m: Month, model: str) -> dict | None:
    """16 bytes of the largest file of the champion's checkpoint inverted; its copy kept as the backup."""
    c = m.champion(model)
    if c is None:
        return None
    folder = Path(m.located(c["run"])) / "checkpoints" / str(c["step"])
    files = sorted((p for p in folder.iterdir() if p.name != "_COMPLETE"), key=lambda p: p.stat().st_size)
    target = files[-1]
    backup = m.work / "backup" / folder.relative_to(m.store)
    backup.mkdir(parents=True, exist_ok=True)
    shutil.copy2(target, backup / target.name)
    data = bytearray(target.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 16] = bytes(b ^ 0xFF for b in data[mid:mid + 16])
    target.write_bytes(bytes(data))
    return {"file": str(target), "backup": str(backup / target.name), "bytes": len(data), "offset": mid,
            "champion": {"run": c["run"], "step": c["step"], "date": c["date"]}}


def fill_when(m: Month, attempt_model: str, date: dt.date, stage: str, record: dict):
    """A poll that fills the store's disk once, when the run of ``attempt_model`` on ``date`` reaches ``stage``
    (``checkpoint``: its run folder holds its config, no checkpoint yet; ``export``: its log says the champion's
    scoring began). It leaves room for the history's rewrite (the failed line) and the small files."""
    def poll(attempt: Attempt) -> None:
        if record.get("filled") is not None:
            return
        if stage == "checkpoint":
            runs = [r for r in m.store.glob(f"runs/{attempt_model}-{date}-*") if (r / "config.yaml").exists()
                    and not list(r.glob("checkpoints/*"))]
            if not runs:
                return
            where = runs[0].name
        else:
            text = Path(attempt.log).read_text(errors="replace")
            if "scoring the champion (" not in text:
                return
            where = "the champion's scoring began"
        hist = m.store / "models" / attempt_model / "history.jsonl"
        leave = (hist.stat().st_size if hist.exists() else 0) + 128 * 1024   # the failed line's rewrite of it
        record["filled"] = {**m.disk.fill(leave), "at_s": round(time.time() - attempt.start, 1), "when": where}
        attempt.event = {"fill": record["filled"]}
    return poll


def sizes_of_last(m: Month, model: str) -> dict:
    """The champion's newest checkpoint step and bundle, in bytes (what a full disk must be too small for)."""
    c = m.champion(model) or {}
    out = {}
    if c:
        out["checkpoint"] = du(Path(m.located(c["run"])) / "checkpoints" / str(c["step"]))
        out["bundle"] = du(Path(m.located(c.get("bundle")) or "/nonexistent"))
    return out


def freeze_when_checkpointed(m: Month, date: dt.date, record: dict):
    """A poll that freezes the moto server once a checkpoint of the remote model's run on ``date`` is complete."""
    last = [0.0]

    def poll(attempt: Attempt) -> None:
        if record.get("frozen_at") is not None and m.moto.frozen and time.time() - record["frozen_at"] > HANG_S:
            # hung past every bound: where it waits (py-spy, when installed), then the server let go on
            dump = m.work / f"remote-hang-{date}.txt"
            try:
                pids = [pid for pid, _ in tagged(attempt.tag)]
                out = [subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True,
                                      timeout=60).stdout for pid in pids]
                dump.write_text("\n".join(out))
                record["stacks"] = str(dump)
            except (OSError, subprocess.SubprocessError) as e:
                record["stacks"] = f"no py-spy dump: {e}"
            record["hung_s"] = round(time.time() - record["frozen_at"])
            m.moto.thaw()
            return
        if record.get("frozen_at") is not None or time.time() - last[0] < 0.5:
            return
        last[0] = time.time()
        try:
            keys = m.moto.keys(f"store/runs/{REMOTE}-{date}-")
        except Exception:   # noqa: BLE001  (a slow answer: ask again)
            return
        done = [k for k in keys if "/checkpoints/" in k and k.endswith("/_COMPLETE")]
        if done:
            m.moto.freeze()
            record["frozen_at"] = time.time()
            record["when"] = f"{done[0]} complete, {time.time() - attempt.start:.0f} s into the run"
            attempt.event = {"frozen": record["when"]}
    return poll


def remote_night(m: Month, n: int, day: dt.date, lose: bool) -> dict:
    """The remote model's night on the S3 store; with ``lose``, the server frozen mid-training, then the re-run."""
    store = f"s3://{BUCKET}/store"
    inputs = m.work / "remote-logs"
    for k in range(MODELS["short"], -1, -1):
        d = day - dt.timedelta(days=k)
        if not day_file(inputs, d).exists():
            clean = m.pristine / day_file(m.logs, d).relative_to(m.logs)
            day_file(inputs, d).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(clean if clean.exists() else day_file(m.logs, d), day_file(inputs, d))
    record: dict = {"night": n, "date": day.isoformat(), "lose": lose}
    cmd = m.command(REMOTE, day, store=store, inputs=inputs)
    a = m.run(REMOTE, day, role="nightly", command=cmd, env=m.moto.env(), store=store,
              poll=freeze_when_checkpointed(m, day, record) if lose else None)
    record.update(rc=a.rc, wall_s=round(a.wall), orphans=a.orphans, error=_error_line(a.log),
                  traceback="Traceback" in (_error_line(a.log) or ""),
                  traceback_in_log="Traceback" in Path(a.log).read_text(errors="replace"),
                  rank_traceback=_rank_traceback(a.log))
    if lose:
        record["fired"] = record.get("frozen_at") is not None
        if record["fired"]:
            record["failed_after_s"] = round(a.end - record["frozen_at"], 1)
            if m.moto.frozen:
                m.moto.thaw()
        r = m.run(REMOTE, day, role="re-run", command=cmd, env=m.moto.env(), store=store)
        text = Path(r.log).read_text(errors="replace")
        record["rerun"] = {"rc": r.rc, "wall_s": round(r.wall), "orphans": r.orphans, "error": _error_line(r.log),
                           "said": [x.split(" - ", 1)[-1][:160] for x in text.splitlines()
                                    if "took over" in x or "resuming training" in x or "fenc" in x][:4]}
    print(f"night {n} {day}: {REMOTE} (S3): rc {a.rc} in {a.wall:.0f} s"
          + (f"; frozen: {record.get('when')}; hung: {record.get('hung_s')}; ended {record.get('failed_after_s')} s after; "
             f"re-run rc {record['rerun']['rc']}" if lose else ""), flush=True)
    return record


def remote_history(m: Month) -> list[dict]:
    if m.moto is None:
        return []
    try:
        body = m.moto.client().get_object(Bucket=BUCKET, Key=f"store/models/{REMOTE}/history.jsonl")["Body"].read()
    except Exception:   # noqa: BLE001
        return []
    return [json.loads(x) for x in body.decode().splitlines() if x.strip()]


# --- the data gate's cases ---------------------------------------------------------------------------------------

def gate_inputs(m: Month) -> None:
    """Each scheduled gate model's own copy of the clean days (``gate-logs/MODEL``) up to its last night, its case
    written into them (``scale_clicks``); what was done per day in ``m.gate['days']``."""
    for model, (event, count) in GATE_MODELS.items():
        if (n0 := m.when(event)) is None:
            continue
        folder, first, last = m.work / "gate-logs" / model, night_date(n0), night_date(min(n0 + count - 1,
                                                                                            m.args.nights))
        for k in range((last - START).days + 1):
            d = START + dt.timedelta(days=k)
            clean = m.pristine / day_file(m.logs, d).relative_to(m.logs)
            day_file(folder, d).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(clean if clean.exists() else day_file(m.logs, d), day_file(folder, d))
        if model == "fresh":   # the oldest day of its first window
            factors = {first - dt.timedelta(days=TRAIN_DAYS.get(model, 3)): FIRST_CLICKS}
        elif model == "shift":   # for good from its first night's day
            factors = {first + dt.timedelta(days=k): SHIFT_CLICKS for k in range((last - first).days + 1)}
        else:   # drift: 20% fewer clicks each day from its first night's day on
            factors = {first + dt.timedelta(days=k): DRIFT_DAILY ** (k + 1) for k in range((last - first).days + 1)}
        done = m.gate["days"].setdefault(model, {})
        for d, factor in factors.items():
            done[d.isoformat()] = {"factor": round(factor, 4),
                                   **scale_clicks(day_file(folder, d), factor, f"{model} {d}")}
        print(f"gate model {model} (nights {n0}..{n0 + count - 1}): " + ", ".join(
            f"{d} clicks x{v['factor']:g} ({v['rate_before']:.4f} -> {v['rate_after']:.4f})" for d, v in done.items()),
            flush=True)


def _line_of(m: Month, model: str, day: dt.date) -> dict:
    return next((e for e in reversed(m.history(model)) if e.get("date") == day.isoformat()), {})


def gate_night(m: Month, model: str, n: int, day: dt.date) -> dict:
    """A gate model's night on its own days; where the gate says a new normal it does not adopt itself, the
    operator's ``dlrmflow days --model MODEL accept-shift DATE`` (once a model)."""
    a = m.run(model, day, role="gate", command=m.command(model, day, inputs=m.work / "gate-logs" / model))
    line = _line_of(m, model, day)
    checks = line.get("data_checks") or {}
    text = Path(a.log).read_text(errors="replace")
    record = {"model": model, "night": n, "date": day.isoformat(), "rc": a.rc, "wall_s": round(a.wall),
              "decision": line.get("decision"), "reason": (line.get("reason") or "")[:600],
              "window": line.get("window") or [], "left_out": sorted(checks.get("left_out") or {}),
              "new_normal": checks.get("new_normal"), "refused": line.get("refused"),
              "said": [x.split(" - ", 1)[-1][:300] for x in text.splitlines() if "a new normal since" in x][:2],
              "error": _error_line(a.log) if a.rc else None}
    m.gate["nights"].append(record)
    shift = record["new_normal"]
    if shift and not shift.get("adopted") and not any(s["model"] == model for s in m.gate["accept_shift"]):
        cmd = [sys.executable, "-m", "flows", "days", "--store", str(m.store), "--model", model, "accept-shift",
               shift["since"], "--why", "month: the doubled click rate is real", "--by", "month operator"]
        o = m.run(model, day, role="operator", command=cmd)
        m.gate["accept_shift"].append({"model": model, "night": n, "since": shift["since"], "rc": o.rc,
                                       "said": _last_lines(o.log, 2)})
    print(f"night {n} {day}: gate model {model}: rc {a.rc} in {a.wall:.0f} s, {record['decision']}"
          + (f"; a new normal since {shift['since']}" if shift else "")
          + "".join(f"; accept-shift {s['since']}: rc {s['rc']}" for s in m.gate["accept_shift"] if s["night"] == n
                    and s["model"] == model), flush=True)
    return record


def chmod_quarantined(m: Month, n: int) -> dict:
    """``chmod 640`` of the newest shared day the gate quarantined by its checks up to night ``n``: its mode, mtime
    and ctime before and after, and each model's verdict lines of it now (they must not change)."""
    days = sorted(d for d, f in m.faults.items() if f["fault"] in GATE_FAULTS and f["night"] <= n)
    if not days:
        return {"night": n, "skipped": "no day quarantined by the gate's checks yet"}
    path = day_file(m.logs, dt.date.fromisoformat(days[-1]))
    before = path.stat()
    os.chmod(path, 0o640)
    after = path.stat()
    out = {"night": n, "day": days[-1], "file": str(path),
           "mode": [oct(before.st_mode & 0o777), oct(after.st_mode & 0o777)],
           "mtime_kept": before.st_mtime_ns == after.st_mtime_ns,
           "ctime_changed": before.st_ctime_ns != after.st_ctime_ns,
           "verdict_lines": {model: sum(v.get("day") == days[-1] for v in m.verdicts(model)) for model in MODELS}}
    print(f"night {n}: chmod 640 {path} ({out['mode'][0]} -> {out['mode'][1]}); its verdict lines: "
          f"{out['verdict_lines']}", flush=True)
    return out


def _rate(line: dict | None) -> str:
    stats = (line or {}).get("stats") or {}
    return f"{stats['positives'] / stats['rows']:.4f}" if stats.get("rows") else "?"


def _checks_of(line: dict | None) -> list[str]:
    return [r.get("check") for r in (line or {}).get("failed") or []]


def _last_verdict(m: Month, model: str, day: str) -> dict:
    return next((v for v in reversed(m.verdicts(model)) if v.get("day") == day), {})


def gate_claims(m: Month, histories: dict[str, list[dict]], parses: collections.Counter) -> list[tuple[str, bool, str]]:
    """The claims of the data gate's cases (issue 46 §1): one per scheduled case."""
    claims = []
    nights = {r["model"]: [x for x in m.gate["nights"] if x["model"] == r["model"]] for r in m.gate["nights"]}

    def ran(model: str) -> tuple[int | None, list[dict], int]:
        event, count = GATE_MODELS[model]
        return m.when(event), nights.get(model, []), min(count, m.args.nights - (m.when(event) or 0) + 1)

    n0, runs, want = ran("fresh")
    if n0 is not None:
        hot = next(iter(m.gate["days"].get("fresh", {})), None)
        first = [night_date(n0) - dt.timedelta(days=k) for k in range(TRAIN_DAYS.get("fresh", 3), -1, -1)]
        v = _last_verdict(m, "fresh", hot) if hot else {}
        good = {d.isoformat(): _last_verdict(m, "fresh", d.isoformat()) for d in first if d.isoformat() != hot}
        others = ", ".join(f"{d} {g.get('verdict')} ({_rate(g)})" for d, g in good.items())
        ok = (v.get("verdict") == "quarantined" and v.get("by") == "data gate" and "label_rate" in _checks_of(v)
              and all(g.get("verdict") == "accepted" for g in good.values()) and len(runs) == want >= 2
              and all(r["rc"] == 0 and r["decision"] in DECIDED and hot not in r["window"] for r in runs))
        claims.append(("a fresh model's first day at 3x the clicks: quarantined, the good days accepted, the nights go "
                       "on", ok, f"{hot} (rate {_rate(v)}): {v.get('verdict')} by {v.get('by')}: "
                       f"{(v.get('why') or '')[:220]!r}; the other days of its first window: "
                       f"{others}; "
                       f"nights: {[(r['date'], r['rc'], r['decision'], r['window']) for r in runs]}"))

    c = m.gate.get("chmod")
    if m.when("chmod") is not None:
        if not c or c.get("skipped"):
            claims.append(("chmod 640 of a quarantined day: its verdict stands", False, str(c)))
        else:
            day, rows = dt.date.fromisoformat(c["day"]), []
            ok = c["mode"][0] != c["mode"][1] and c["mtime_kept"]
            for model in MODELS:
                lines = [v for v in m.verdicts(model) if v.get("day") == c["day"]]
                later = [e for e in histories[model] if night_date(c["night"]) < dt.date.fromisoformat(e["date"])
                         <= day + dt.timedelta(days=TRAIN_DAYS[model]) and e.get("decision") != "failed"]
                held = [e["date"] for e in later if c["day"] in ((e.get("data_checks") or {}).get("left_out") or {})
                        and c["day"] not in (e.get("window") or [])]
                ok = ok and len(lines) == c["verdict_lines"][model] and lines[-1].get("verdict") == "quarantined" \
                    and bool(later) and len(held) == len(later)
                rows.append(f"{model}: {len(lines)} verdict line(s) (at the chmod {c['verdict_lines'][model]}), "
                            f"{lines[-1].get('verdict') if lines else None}; later nights that left it out: "
                            f"{len(held)} of {len(later)}")
            parsed = parses.get(c["file"], 0)
            ok = ok and parsed == 1
            claims.append(("chmod 640 of a quarantined day: its verdict stands (not judged, parsed or trained on "
                           "again)", ok,
                           f"{c['day']} (night {c['night']}): mode {c['mode'][0]} -> {c['mode'][1]}, mtime "
                           f"kept: {c['mtime_kept']}, ctime changed: {c['ctime_changed']}; {'; '.join(rows)}; "
                           f"parses of its file: {parsed}"))

    n0, runs, want = ran("shift")
    if n0 is not None:
        since = night_date(n0).isoformat()
        stopped, after = runs[:3], runs[3:]
        accepted = m.gate["accept_shift"]
        per_night = collections.Counter(e.get("date") for e in m.history("shift"))
        new_days = [d for d in m.gate["days"].get("shift", {}) if d <= (stopped[-1]["date"] if stopped else "")]
        shifted = [_last_verdict(m, "shift", d) for d in new_days]
        ok = (len(runs) == want == 4 and all(r["decision"] == "data_failed" and "label_rate" in r["reason"]
                                              for r in stopped)
              and not any(r["new_normal"] for r in stopped[:2]) and (stopped[-1]["new_normal"] or {}).get("since")
              == since and any(f"a new normal since {since}" in x for x in stopped[-1]["said"])
              and [(s["model"], s["since"], s["rc"]) for s in accepted] == [("shift", since, 0)]
              and all(v.get("verdict") == "accepted" and v.get("new_normal") == since for v in shifted)
              and all(r["rc"] == 0 and r["decision"] in DECIDED and r["window"]
                      and min(r["window"]) >= since for r in after)
              and all(per_night[r["date"]] == 1 for r in runs))
        claims.append(("a lasting shift (clicks 2x from a night on): quarantined, then a new normal said, "
                       "accept-shift once, the later nights train on it; one history line a night", ok,
                       f"since {since}: " + "; ".join(
                           f"{r['date']} rc {r['rc']} {r['decision']} ({per_night[r['date']]} line)"
                           + (f" said {r['said'][0][:200]!r}" if r["said"] else "")
                           + (f" window {r['window'][0]}..{r['window'][-1]}" if r in after and r["window"] else "")
                           for r in runs)
                       + f"; accept-shift: {[(s['since'], s['rc'], s['said'][:160]) for s in accepted]}; the shifted "
                       f"days' verdicts after it: "
                       f"{[(d, v.get('verdict'), v.get('by')) for d, v in zip(new_days, shifted)]}"))

    n0, runs, want = ran("drift")
    if n0 is not None:
        d1, d2 = night_date(n0).isoformat(), night_date(n0 + 1).isoformat()
        v1, v2 = _last_verdict(m, "drift", d1), _last_verdict(m, "drift", d2)
        ok = (len(runs) == want == 2 and v1.get("verdict") == "accepted" and v2.get("verdict") == "quarantined"
              and "label_rate_long" in _checks_of(v2) and "label_rate" not in _checks_of(v2)
              and runs[0]["rc"] == 0 and runs[0]["decision"] in DECIDED and runs[1]["decision"] == "data_failed")
        claims.append(("slow drift (clicks -20% a day): caught by the long reference on its second day", ok,
                       f"{d1} (x{DRIFT_DAILY:g}, rate {_rate(v1)}): {v1.get('verdict')}; "
                       f"{d2} (x{DRIFT_DAILY ** 2:.2f}, "
                       f"rate {_rate(v2)}): {v2.get('verdict')}: {(v2.get('why') or '')[:260]!r}; nights: "
                       f"{[(r['date'], r['rc'], r['decision']) for r in runs]}"))

    dup = [(d, f) for d, f in m.faults.items() if f["fault"] == "duplicates"]
    for d, f in dup:
        rows = {model: _last_verdict(m, model, d) for model in MODELS}
        ok = all(v.get("verdict") == "quarantined" and _checks_of(v) == ["duplicates"] for v in rows.values())
        share = next((r.get("value") for v in rows.values() for r in v.get("failed") or []
                      if r.get("check") == "duplicates"), None)
        claims.append(("rows ingested 1.9x: quarantined by the duplicates check alone", ok,
                       f"{d} ({f['what']}): " + "; ".join(f"{k}: {v.get('verdict')}, failed {_checks_of(v)}"
                                                            for k, v in rows.items())
                       + f"; sampled duplicated share {share}"))

    p = m.gate.get("permuted")
    if p:
        rows = []
        ok = True
        for model in MODELS:
            line = next((e for e in histories[model] if e.get("date") == p["date"]), {})
            ch = line.get("challenger") or {}
            ne = ch["logloss"] / ch["base_logloss"] if ch.get("logloss") and ch.get("base_logloss") else None
            floors = {"min_auc_lift", "max_ne"} & set(line.get("refused") or [])
            ok = ok and line.get("decision") == "kept" and bool(floors)
            rows.append(f"{model}: {line.get('decision')} (refused {line.get('refused')}), challenger AUC "
                        f"{ch.get('auc', float('nan')):.4f}, NE {ne if ne is None else round(ne, 4)}")
        claims.append(("labels permuted (no signal, marginals kept): the night promotes no challenger", ok,
                       f"{p['date']} (night {p['night']}, {p['what']}): {'; '.join(rows)}"))
    # every promoted line of every model above the AUC floor and below max_ne
    bad, count = [], 0
    for model in [*MODELS, *GATE_MODELS]:
        for e in histories.get(model) or m.history(model):
            if e.get("decision") not in PROMOTING:
                continue
            count += 1
            ch, gates = e.get("challenger") or {}, e.get("gates") or {}
            floor = 0.5 + gates.get("min_auc_lift", 0.01)
            ne = ch["logloss"] / ch["base_logloss"] if ch.get("base_logloss") else math.nan
            if not (ch.get("auc", 0) > floor and ne < gates.get("max_ne", 1.0)):
                bad.append(f"{model} {e['date']}: AUC {ch.get('auc')}, NE {ne}")
    claims.append(("no promoted challenger at or below the AUC floor or at NE >= max_ne (every model)", not bad,
                   f"{count} promoting lines" + (f"; wrong: {bad}" if bad else
                                                 ", all above the floor and below max_ne")))
    return claims


# --- the month -------------------------------------------------------------------------------------------------

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nights", type=int, default=30)
    p.add_argument("--rows-per-day", type=int, default=4000)
    p.add_argument("--keep-nights", type=int, default=7, help="gc.keep_nights of the runs (default 7)")
    p.add_argument("--work", default=None, help="work folder (default: WORK/month in a new temporary folder, kept; "
                   "its parent must be yours alone: the hostile spec's check lists it)")
    p.add_argument("--at", nargs="*", metavar="NAME=NIGHT", help="move an event to another night (0: leave it out)")
    p.add_argument("--tmpfs-mib", type=int, default=512, help="the store's tmpfs (default 512 MiB)")
    p.add_argument("--report", metavar="WORK", help="only the claims and tables again, of a finished month's work "
                   "folder (its results.json, store-final/, run-logs/)")
    args = p.parse_args()
    if args.report:
        return report_again(Path(args.report).resolve())
    args.work = args.work or os.path.join(tempfile.mkdtemp(prefix="dlrmflow-month-"), "month")
    m = Month(args)
    for folder in (m.logs, m.runlogs, m.fs, m.pristine):
        folder.mkdir(parents=True, exist_ok=True)
    if m.store.exists():
        raise SystemExit(f"{m.store} exists: give a fresh --work folder")
    mounted = False
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.tmpfs_mib}m", "tmpfs",
                                             str(m.fs)], capture_output=True).returncode == 0:
        mounted = True
        m.disk = Disk(m.fs)
    else:
        for k in ("disk_checkpoint", "disk_export"):
            m.at.pop(k, None)
        print("no tmpfs could be mounted (not root?): the disk-full faults are left out", flush=True)
    m.store.mkdir()
    print("schedule: " + ", ".join(f"{k} {v}" for k, v in sorted(m.at.items(), key=lambda kv: kv[1])), flush=True)
    began, loads = time.time(), [os.getloadavg()[0]]

    from synthetic.generator import SynthConfig, write_days

    write_days(SynthConfig(out=str(m.logs), days=args.nights + LEAD, start=START, rows_per_day=args.rows_per_day,
                           files=1, seed=11))
    write_spec(m.spec)
    def injected(fault: str, n: int) -> tuple[dt.date, str, dict]:
        """``fault`` injected into night ``n``'s test day, its clean file kept under ``m.pristine``."""
        day = night_date(n)
        path = day_file(m.logs, day)
        keep = m.pristine / path.relative_to(m.logs)
        keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, keep)
        return (day, *inject(path, fault))

    for fault in DATA_FAULTS:
        if (n := m.when(fault)) is not None:
            day, what, words = injected(fault, n)
            m.faults[day.isoformat()] = {"fault": fault, "night": n, "what": what, "words": words}
            print(f"fault on {day} (night {n}): {fault}: {what}", flush=True)
    for fault in SILENT_FAULTS:
        if (n := m.when(fault)) is not None:
            day, what, _ = injected(fault, n)
            m.gate[fault] = {"date": day.isoformat(), "night": n, "what": what}
            print(f"{fault} on {day} (night {n}): {what}", flush=True)
    gate_inputs(m)

    server, api = start_server(m.work)
    m.env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_HOME": str(m.work / "prefect"),
             "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    if m.when("s3") is not None:
        m.moto = Moto(m.work)
    watch = ParseWatch(m.store)
    watch.start()
    armed: dict[str, tuple[str, int]] = {}   # model -> (promotion write, armed since night)
    export_armed = False
    fired: list[dict] = []
    remote: list[dict] = []
    hostile = None
    crashes = {m.when(k): v for k, v in CRASHES.items() if m.when(k) is not None}
    kills = {m.when(k): v for k, v in KILLS.items() if m.when(k) is not None}
    outage = m.when("outage")
    try:
        for n in range(1, args.nights + 1):
            day = night_date(n)
            t0 = time.time()
            if n == m.when("move"):   # the store moved: renamed on its filesystem, the later runs given its new path
                moved = m.fs / "store-moved"
                os.rename(m.store, moved)
                m.ops.append({"op": "move", "night": n, "date": day.isoformat(), "from": str(m.store), "to": str(moved)})
                print(f"night {n} {day}: the store moved: {m.store} -> {moved}", flush=True)
                m.store = watch.store = moved
            if n in crashes:
                model, write = crashes[n]
                armed[model] = (write, n)
            if n == m.when("disk_export"):
                export_armed = True
            if n == outage:
                print(f"night {n} {day}: nothing runs (an outage)", flush=True)
            if n == m.when("hostile"):
                hostile = hostile_night(m, n, day)
            if outage and n == outage + 1:   # short's backfill of the missed night and its nightly run at once, then long's
                back = night_date(outage)
                a1, p1 = m.start("short", back, "backfill")
                a2, p2 = m.start("short", day, "nightly")
                done = [m.finish(a1, p1), m.finish(a2, p2), m.run("long", back, "backfill")]
                for a in done:
                    print(f"night {n} {day}: {a.model} {a.role} {a.date}: rc {a.rc} in {a.wall:.0f} s", flush=True)
            for model in MODELS:
                if n == outage or (outage and n == outage + 1 and model == "short"):
                    continue
                kill = kills[n][1] if kills.get(n, (None,))[0] == model else None
                crash = armed[model][0] if model in armed else None
                op, poll = None, None
                if n == m.when("corrupt") and model == OPS["corrupt"]:
                    op = {"op": "corrupt", "night": n, "date": day.isoformat(), "model": model,
                          **(corrupt_champion(m, model) or {"skipped": "no champion"})}
                elif n == m.when("disk_checkpoint") and model == OPS["disk_checkpoint"] and m.disk.mount:
                    op = {"op": "disk_checkpoint", "night": n, "date": day.isoformat(), "model": model,
                          "sizes": sizes_of_last(m, model)}
                    poll = fill_when(m, model, day, "checkpoint", op)
                elif export_armed and model == OPS["disk_export"] and m.disk.mount:
                    op = {"op": "disk_export", "night": n, "date": day.isoformat(), "model": model,
                          "sizes": sizes_of_last(m, model)}
                    poll = fill_when(m, model, day, "export", op)
                if n == m.when("twice") and model == OPS["twice"]:
                    a1, p1 = m.start(model, day, "nightly")
                    a2, p2 = m.start(model, day, "twin")
                    a, b = m.finish(a1, p1), m.finish(a2, p2)
                    runs = sorted(r.name for r in m.store.glob(f"runs/{model}-{day}-*"))
                    texts = [Path(x.log).read_text(errors="replace") for x in (a, b)]
                    said = [[x.split(" - ", 1)[-1][:170] for x in t.splitlines()
                             if any(w in x for w in ("waiting for the", "already complete", "already decided",
                                                     "reusing", "took over"))] for t in texts]
                    m.ops.append({"op": "twice", "night": n, "date": day.isoformat(), "model": model,
                                  "rcs": [a.rc, b.rc], "walls": [round(a.wall), round(b.wall)],
                                  "overlap_s": round(min(a.end, b.end) - max(a.start, b.start)), "runs": runs,
                                  "said": said, "orphans": a.orphans + b.orphans})
                    print(f"night {n} {day}: {model} twice at once: rc {a.rc}, {b.rc}; runs {runs}", flush=True)
                    continue
                a = m.run(model, day, kill=kill, crash=crash, poll=poll)
                print(f"night {n} {day}: {model}: rc {a.rc} in {a.wall:.0f} s" + (f", killed: {a.killed}" if a.killed else "")
                      + (f", {a.event}" if a.event else ""), flush=True)
                if op is not None:
                    m.disk.clear()
                    night_line = next((e for e in reversed(m.history(model)) if e.get("date") == day.isoformat()), {})
                    if op["op"] == "disk_export" and op.get("filled") is None:
                        op = None   # no export this night (no champion scored): armed again tomorrow
                    elif op["op"] == "disk_export" and a.rc == 0 and night_line.get("decision") == "kept":
                        op["no_export"] = True   # filled, but the night kept its champion: armed again
                        m.ops.append(op)
                        op = None
                    elif op.get("skipped") or a.rc == 0:   # nothing to fix: the fault did not fire (a claim says so)
                        op.update(rc=a.rc, wall_s=round(a.wall), error=None, traceback=False, orphans=a.orphans,
                                  log=a.log, rerun={"rc": None, "decision": night_line.get("decision")})
                        m.ops.append(op)
                        if op["op"] == "disk_export":
                            export_armed = False
                        op = None
                    else:
                        op.update(rc=a.rc, wall_s=round(a.wall), error=_error_line(a.log),
                                  traceback="Traceback" in (_error_line(a.log) or ""),
                                  traceback_in_log="Traceback" in Path(a.log).read_text(errors="replace"),
                                  rank_traceback=_rank_traceback(a.log), orphans=a.orphans, log=a.log)
                        if op["op"] == "disk_checkpoint":
                            op["incomplete_left"] = [str(c) for r in m.store.glob(f"runs/{model}-{day}-*")
                                                     for c in r.glob("checkpoints/*") if c.is_dir()
                                                     and not (c / "_COMPLETE").exists()]
                        if op["op"] == "disk_export":
                            export_armed = False
                            op["temp_left"] = [str(x) for x in (m.store / "models" / model / "bundles").iterdir()
                                               if x.name.startswith(".") or "tmp" in x.name]
                        if op["op"] == "corrupt" and op.get("backup"):
                            shutil.copy2(op["backup"], op["file"])   # the fix the error gives: restored from a backup
                        r = m.run(model, day, role="re-run")
                        line = next((e for e in reversed(m.history(model)) if e.get("date") == day.isoformat()), {})
                        op["rerun"] = {"rc": r.rc, "wall_s": round(r.wall), "decision": line.get("decision"),
                                       "orphans": r.orphans}
                        print(f"night {n} {day}: {model}: {op['op']}: {str(op.get('error'))[:200]}; re-run rc {r.rc} "
                              f"({line.get('decision')})", flush=True)
                        m.ops.append(op)
                if a.killed:
                    if kill is None:
                        line = next((e for e in reversed(m.history(model)) if e.get("date") == day.isoformat()), None)
                        champ = m.champion(model) or {}
                        decided = line or (champ.get("line") if (champ.get("line") or {}).get("date") == day.isoformat() else None)
                        fired.append({"model": model, "night": n, "date": day.isoformat(), "write": crash,
                                      "decision": (decided or {}).get("decision")})
                    r = m.run(model, day, role="re-run")
                    print(f"night {n} {day}: {model}: re-run rc {r.rc} in {r.wall:.0f} s", flush=True)
                    if kill is None:
                        final = next((e for e in reversed(m.history(model)) if e.get("date") == day.isoformat()), {})
                        fired[-1]["final"] = final.get("decision")
                        if final.get("decision") in PROMOTING:
                            armed.pop(model, None)
            # a day whose parse fails: the data gate's own verdict (5d16de3); where it made none, the operator's fix
            f = m.faults.get(day.isoformat())
            if f and f["fault"] in PARSE_FAULTS:
                for model in MODELS:
                    verdict = next((v for v in reversed(m.verdicts(model)) if v.get("day") == day.isoformat()), None)
                    m.parse_verdicts[f"{model} {day}"] = verdict
                    if not verdict or verdict.get("verdict") != "quarantined":
                        m.operator_quarantine(model, day, f"{f['fault']}: its parse fails (month.py's operator)")
            for model, (event, count) in GATE_MODELS.items():   # the gate's cases on their own days
                if m.when(event) is not None and m.when(event) <= n < m.when(event) + count:
                    gate_night(m, model, n, day)
            if n == m.when("chmod"):
                m.gate["chmod"] = chmod_quarantined(m, n)
            if m.moto is not None and n == m.when("s3") - 1:
                remote.append(remote_night(m, n, day, lose=False))
            if m.moto is not None and n == m.when("s3"):
                remote.append(remote_night(m, n, day, lose=True))
            lines = {model: [e for e in m.history(model) if e.get("date") == day.isoformat()] for model in MODELS}
            checked = {model: m.check_champion(model, day) for model in MODELS}
            size = m.sizes()
            m.nights.append({"night": n, "date": day.isoformat(), "wall_s": round(time.time() - t0, 1),
                             "t_end": time.time(),
                             "load": round(os.getloadavg()[0], 2), "bytes": sum(size.values()), "by_folder": size,
                             "decisions": {k: [e.get("decision") for e in v] for k, v in lines.items()},
                             "champions": {k: (c or {}).get("run") for k, c in checked.items()},
                             "orphans": [o for a in m.attempts if a.start >= t0 for o in a.orphans]})
            loads.append(os.getloadavg()[0])
            print(f"night {n} {day}: " + ", ".join(f"{k} {v}" for k, v in m.nights[-1]["decisions"].items())
                  + f"; store {sum(size.values()) / 2**20:.1f} MiB; {time.time() - t0:.0f} s; load {loads[-1]:.1f}",
                  flush=True)
    finally:
        watch.stop.set()
        m.disk.clear()
        remote_lines = remote_history(m)
        if m.moto is not None:
            m.moto.stop()
        stop_group(server)
        if mounted:
            final = m.work / "store-final"
            shutil.copytree(m.store, final, symlinks=True, dirs_exist_ok=True)
            subprocess.run(["umount", str(m.fs)], check=False)
            m.store = final
    wall = time.time() - began
    return report(m, watch, fired, wall, loads, hostile, remote, remote_lines)


# --- the claims ------------------------------------------------------------------------------------------------

DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
BLAME_RES = [re.compile(r"\bday (\d{4}-\d{2}-\d{2})(?:, feature [^:]+)?: \w+ \S+ (?:outside|>|<) "),
             re.compile(r"data gate: day (\d{4}-\d{2}-\d{2}) quarantined"),
             re.compile(r"test day (\d{4}-\d{2}-\d{2}) is quarantined")]


def report(m: Month, watch: ParseWatch, fired: list[dict], wall: float, loads: list[float], hostile: dict | None,
           remote: list[dict], remote_lines: list[dict]) -> int:
    claims: list[tuple[str, bool, str]] = []
    nights = [x["date"] for x in m.nights]
    histories = {model: m.history(model) for model in MODELS}
    faulty = set(m.faults)
    ops_by = collections.Counter((o.get("model"), o["date"]) for o in m.ops
                                 if o["op"] in ("disk_checkpoint", "disk_export", "corrupt") and not o.get("no_export")
                                 and o.get("rc") not in (0, None))

    # each night's lines: one outcome, and a failed line only where a fault was injected into the night's run
    for model, lines in histories.items():
        per = collections.Counter(e.get("date") for e in lines)
        bad = {}
        for d in set(nights) | set(per):
            want = 1 + ops_by.get((model, d), 0)
            outcome = [e for e in lines if e.get("date") == d]
            decided = [e for e in outcome if e.get("decision") != "failed"]
            if per.get(d, 0) != want or (d not in faulty and len(decided) != 1):
                bad[d] = [e.get("decision") for e in outcome]
        claims.append((f"one outcome per night, a failed line only for an injected fault ({model})", not bad,
                       f"{len(lines)} lines for {len(nights)} nights, {sum(ops_by[k] for k in ops_by if k[0] == model)}"
                       f" failed line(s) of injected faults" + (f"; wrong: {bad}" if bad else "")))

    # no faulty night promoted; no champion ever trained on a faulty day
    promoted_bad = [(model, e["date"]) for model, lines in histories.items() for e in lines
                    if e.get("decision") in PROMOTING and (e["date"] in faulty or faulty & set(e.get("window") or []))]
    claims.append(("no faulty night promoted, no window holds a bad day", not promoted_bad,
                   f"{len(faulty)} faulty days; promoted lines reading one: {promoted_bad or 'none'}"))

    # each bad day named in its night's history line and log, and in no other night's line
    for date, f in sorted(m.faults.items()):
        for model in MODELS:
            line = next((e for e in histories[model] if e.get("date") == date), None)
            reason = (line or {}).get("reason") or ""
            words = [w.format(date=date, path=day_file(m.logs, dt.date.fromisoformat(date)), **f["words"])
                     for w in FAULT_NAMES[f["fault"]]]
            logs = "".join(Path(a.log).read_text(errors="replace") for a in m.attempts
                           if a.model == model and a.date == date and a.role != "operator")
            in_history = bool(line) and line.get("decision") not in PROMOTING and all(w in reason for w in words)
            in_log = all(w in logs for w in words)
            elsewhere = [e["date"] for e in histories[model] if e.get("date") != date and words[0] in (e.get("reason") or "")]
            f.setdefault("named", {})[model] = {"decision": (line or {}).get("decision"), "reason": reason[:300]}
            claims.append((f"bad day {f['fault']} ({date}) named once, in its night ({model})",
                           in_history and in_log and not elsewhere,
                           f"history: {(line or {}).get('decision')}: {reason[:170]!r}; in the log: {in_log}; "
                           f"in other nights' lines: {elsewhere or 'none'}"))

    # the nights after a bad day trained without it; it appears in their lines only under data_checks.left_out
    for date, f in sorted(m.faults.items()):
        bad_day = dt.date.fromisoformat(date)
        for model, days in MODELS.items():
            later = [e for e in histories[model] if bad_day < dt.date.fromisoformat(e["date"]) <= bad_day + dt.timedelta(days=days)]
            wrong = []
            for e in later:
                trimmed = json.loads(json.dumps(e))
                (trimmed.get("data_checks") or {}).pop("left_out", None)
                mentioned = date in json.dumps(trimmed)
                left = date in ((e.get("data_checks") or {}).get("left_out") or {})
                if e.get("decision") == "failed" and any(o["date"] == e["date"] for o in m.ops):
                    continue   # an injected fault's failed line; its re-run's line is checked
                if e["date"] in faulty and not mentioned:
                    continue   # a later bad day's own night: its fault is checked above
                if e.get("decision") not in DECIDED or mentioned or not left:
                    wrong.append(f"{e['date']} {e.get('decision')} (left_out: {left}, named elsewhere: {mentioned})")
            expected = len([d for d in nights if bad_day < dt.date.fromisoformat(d) <= bad_day + dt.timedelta(days=days)])
            claims.append((f"the nights after {f['fault']} ({date}) trained without it ({model})",
                           not wrong and len({e['date'] for e in later}) == expected and expected > 0,
                           f"{len({e['date'] for e in later})} of {expected} later nights whose window held it decided "
                           f"({', '.join(sorted(collections.Counter(e.get('decision') for e in later if e.get('decision') != 'failed')))})"
                           f", the day only under data_checks.left_out" + (f"; wrong: {wrong}" if wrong else "")))

    # no good day blamed: the verdicts, the history lines' failed checks, the logs
    blamed = []
    for model in MODELS:
        for v in m.verdicts(model):
            if v.get("verdict") == "quarantined" and v["day"] not in faulty:
                blamed.append(f"{model} days.jsonl: {v['day']} quarantined by {v.get('by')}: {str(v.get('why'))[:80]}")
        for e in histories[model]:
            for row in (e.get("data_checks") or {}).get("failed") or []:
                if row.get("day") not in faulty:
                    blamed.append(f"{model} history {e['date']}: failed check of {row.get('day')}")
    for a in m.attempts:
        if a.model not in MODELS:
            continue
        for x in Path(a.log).read_text(errors="replace").splitlines():
            if "left out" in x and "quarantined" in x and "is quarantined" not in x:
                continue   # the window's description of what it leaves out
            for rx in BLAME_RES:
                for d in rx.findall(x):
                    if d not in faulty:
                        blamed.append(f"{a.model} {a.date} {a.role} log: {x.split(' - ', 1)[-1][:120]}")
    verdicts = {model: collections.Counter(v["verdict"] for v in m.verdicts(model)) for model in MODELS}
    claims.append(("no good day blamed", not blamed,
                   "verdicts: " + "; ".join(f"{k}: {dict(v)}" for k, v in verdicts.items())
                   + f"; quarantined days: {sorted({v['day'] for k in MODELS for v in m.verdicts(k) if v.get('verdict') == 'quarantined'})}"
                   + (f"; blamed: {blamed[:5]}" if blamed else "; no good day in a failed check, a quarantine or a log's failure line")))

    # a day whose parse fails: quarantined by the data gate itself (its verdict "its parse failed: ..."), no operator
    for date, f in sorted(m.faults.items()):
        if f["fault"] not in PARSE_FAULTS:
            continue
        words = [w.format(date=date, path=day_file(m.logs, dt.date.fromisoformat(date)), **f["words"])
                 for w in FAULT_NAMES[f["fault"]]]
        for model in MODELS:
            v = m.parse_verdicts.get(f"{model} {date}") or {}
            why = str(v.get("why") or "")
            by_operator = [o for o in m.operator if o["model"] == model and o["day"] == date]
            final = next((x for x in reversed(m.verdicts(model)) if x.get("day") == date), {})
            ok = (v.get("verdict") == "quarantined" and v.get("by") == "data gate"
                  and why.startswith("its parse failed: ") and words[0] in why and not by_operator and final.get("verdict") == "quarantined")
            claims.append((f"bad day {f['fault']} ({date}) quarantined by the data gate itself ({model})", ok,
                           f"days.jsonl after its night: {v.get('verdict')} by {v.get('by')!r}: {why[:200]!r}"
                           + (f"; **the operator had to quarantine it** (rc {[o['rc'] for o in by_operator]})"
                              if by_operator else "; no operator")))
    if m.operator:   # only where the gate made no verdict (a claim above fails for each)
        claims.append(("no operator quarantine needed (dlrmflow days)", False,
                       "; ".join(f"{o['model']} {o['day']} rc {o['rc']}" for o in m.operator)))

    # the operational faults
    for o in m.ops:
        if o["op"] == "corrupt":
            name = Path(o.get("file", "?")).name
            err = o.get("error") or ""
            line = next((e for e in histories[o["model"]] if e.get("date") == o["date"] and e.get("decision") == "failed"), {})
            named = name in err and name in (line.get("reason") or "") and "damaged" in err
            claims.append(("a corrupted champion checkpoint named, restored, the night trained",
                           "skipped" not in o and o["rc"] != 0 and named and not o["traceback"]
                           and o["rerun"]["rc"] == 0 and o["rerun"]["decision"] in DECIDED,
                           f"{o['model']} {o['date']}: rc {o['rc']}: {err[:260]!r}; history: {line.get('decision')}; "
                           f"restored, re-run rc {o['rerun']['rc']} ({o['rerun']['decision']})"))
        if o["op"] in ("disk_checkpoint", "disk_export") and not o.get("no_export"):
            what = "checkpoints" if o["op"] == "disk_checkpoint" else "bundles"
            err = o.get("error") or ""
            line = next((e for e in histories[o["model"]] if e.get("date") == o["date"] and e.get("decision") == "failed"), {})
            def spaced(text: str, what: str = what) -> bool:
                return ("no space left on device" in text or "not enough free space" in text) and what in text
            left = o.get("incomplete_left") or o.get("temp_left") or []
            claims.append((f"disk full at {'a checkpoint' if what == 'checkpoints' else 'the export'}: named, nothing "
                           "half-written left, the night trained after space was freed",
                           o.get("filled") is not None and o["rc"] != 0 and spaced(err) and not o["traceback"]
                           and not o.get("rank_traceback")
                           and not left and spaced(line.get("reason") or "")
                           and o["rerun"]["rc"] == 0 and o["rerun"]["decision"] in DECIDED,
                           f"{o['model']} {o['date']}: filled {o.get('filled')}; sizes {o.get('sizes')}; rc {o['rc']}: "
                           f"{err[:300]!r}; a rank's traceback in its log: {o.get('rank_traceback')}; history: "
                           f"{line.get('decision')}; left: {left or 'nothing'}; "
                           f"re-run rc {o['rerun']['rc']} ({o['rerun']['decision']})"))
        if o["op"] == "twice":
            lines = [e for e in histories[o["model"]] if e.get("date") == o["date"]]
            waited = [s for said in o["said"] for s in said]
            claims.append(("two runs of one night at once: both end, one run trained, one history line",
                           o["rcs"] == [0, 0] and len(o["runs"]) == 1 and len(lines) == 1 and o["overlap_s"] > 0,
                           f"{o['model']} {o['date']}: rc {o['rcs']}, {o['walls']} s, overlapping {o['overlap_s']} s; "
                           f"run folders {o['runs']}; history: {[e.get('decision') for e in lines]}; they said: "
                           f"{[said[:4] for said in o['said']]}"))
        if o["op"] == "move":
            after = [x for x in m.nights if x["night"] >= o["night"] and x["date"] not in faulty]
            decided = {model: [e.get("decision") for e in histories[model] if e["date"] in {x["date"] for x in after}]
                       for model in MODELS}
            runs_after = [a for a in m.attempts if a.model in MODELS and a.date in {x["date"] for x in after}]
            warm = sum("warm start from the champion" in Path(a.log).read_text(errors="replace") for a in runs_after)
            champs = [c for c in m.champions.values() if c.get("store") == "store-moved"]
            ok = (all(d and all(x in DECIDED for x in d) for d in decided.values()) and all(a.rc == 0 for a in runs_after)
                  and all(c.get("verified") and c.get("scored_rows") for c in champs))
            claims.append(("the store moved: the later nights warm-start, compete and promote from it (its bad "
                           "days' own nights aside), its champions verify and score", ok,
                           f"moved before night {o['night']}; decisions after: {decided}; runs' rc "
                           f"{[a.rc for a in runs_after]}; warm starts said: {warm}; champions checked there: "
                           f"{[(c['model'], c.get('verified'), c.get('error', '')[:160]) for c in champs]}; errors: "
                           f"{[(_error_line(a.log) or '')[:300] for a in runs_after if a.rc != 0][:2]}"))

    if m.when("disk_export") is not None and m.disk.mount is not None and not any(
            o["op"] == "disk_export" and not o.get("no_export") for o in m.ops):
        kept = [o["date"] for o in m.ops if o["op"] == "disk_export"]
        claims.append(("disk full at the export: named, nothing half-written left, the night trained after space was "
                       "freed", False, f"never fired: armed from night {m.when('disk_export')}, no export met the full "
                       f"disk (filled but the champion kept: {kept or 'none'}; other nights: no champion scored)"))

    # the hostile spec
    if hostile is not None:
        own = [p for p in hostile["changed_outside"] if Path(p).name in OWN_LOGS]
        changed = [p for p in hostile["changed_outside"] if p not in own]
        ok = not hostile["new_outside"] and not changed and not hostile["escaped"] and not hostile["traceback"]
        claims.append(("a spec with hostile feature names writes nothing outside the store", ok,
                       f"rc {hostile['rc']} ({hostile['decision'] or hostile['error']}); new outside: "
                       f"{hostile['new_outside'] or 'none'}; changed outside: {changed or 'none'}"
                       + (f" (but {own}: this script's own output)" if own else "") + "; "
                       f"month-escape* at /, /tmp, the work folder's parent: {hostile['escaped'] or 'none'}"))

    # S3 lost mid-night
    for r in remote:
        if not r["lose"]:
            claims.append((f"the S3 model's first night ({r['date']})", r["rc"] == 0, f"rc {r['rc']} in {r['wall_s']} s"))
            continue
        bound = s3_bound_here()   # one call's most seconds (common.s3.s3_bound of S3_ENV's settings)
        err = r.get("error") or ""
        claims.append(("S3 lost mid-night: one line naming the store within the bounds, no process left, the re-run "
                       "ends the night",
                       bool(r.get("fired")) and r.get("hung_s") is None and r["rc"] != 0
                       and f"store 's3://{BUCKET}/store'" in err and not r["traceback"]
                       and not r.get("rank_traceback") and not r["orphans"]
                       and r.get("failed_after_s", 1e9) <= 3 * bound
                       and r["rerun"]["rc"] == 0 and not r["rerun"]["orphans"],
                       f"frozen when {r.get('when')}; "
                       + (f"**still running {r['hung_s']} s after** (stacks: {r.get('stacks')}), the server let go on; "
                          if r.get("hung_s") is not None else "")
                       + f"ended {r.get('failed_after_s')} s after the freeze (claim: <= 3 x s3_bound() = "
                       f"{3 * bound:.0f} s; one call {bound:.0f} s); rc {r['rc']}: {err[:400]!r}; a rank's traceback "
                       f"in its log: {r.get('rank_traceback')} (any traceback: {r.get('traceback_in_log')}); orphans: "
                       f"{r['orphans'] or 'none'}; re-run: "
                       f"{(r['rerun'].get('error') or '')[:200]!r}; re-run rc "
                       f"{r['rerun']['rc']} in {r['rerun']['wall_s']} s, said {r['rerun']['said']}; {REMOTE}'s "
                       f"history: {[(e['date'], e.get('decision')) for e in remote_lines]}"))

    # no process left by any run
    orphans = [(a.model, a.date, a.role, o) for a in m.attempts for o in a.orphans]
    claims.append(("no process outlives its run", not orphans,
                   f"{len(m.attempts)} runs, each checked 15 s after it ended (its tag in /proc/*/environ): "
                   + (f"{orphans[:5]}" if orphans else "none left")))

    # every champion a complete, manifest-verified bundle that scores
    bad = [c for c in m.champions.values() if not c.get("verified") or not c.get("scored_rows")]
    claims.append(("every champion verified and scored", bool(m.champions) and not bad,
                   f"{len(m.champions)} champions checked" + (f"; failing: {bad[:3]}" if bad else "")))

    # the kills: each re-run ended as a night does, and its log names what the killed run left
    for a in m.attempts:
        if a.killed:
            rerun = next((r for r in m.attempts if r.role == "re-run" and r.model == a.model and r.date == a.date
                          and r.start > a.start), None)
            said = KILL_NAMES[a.killed.split(" ")[0]]
            text = Path(rerun.log).read_text(errors="replace") if rerun else ""
            line = next((x.split(" - ", 1)[-1][:130] for x in text.splitlines() if said in x), None)
            claims.append((f"killed {a.model} {a.date} at {a.killed.split(' ')[0]}, re-run ok and named",
                           rerun is not None and rerun.rc == 0 and line is not None,
                           f"{a.killed}; re-run rc {rerun and rerun.rc}; its log: {line!r}"))
    for key, (_, write) in CRASHES.items():
        if m.when(key) is not None:
            hit = [f for f in fired if f["write"] == write and f.get("final") in PROMOTING]
            claims.append((f"killed after the promotion write '{write}'", bool(hit),
                           "; ".join(f"{f['model']} {f['date']} ({f['decision']} -> {f['final']})"
                                     for f in fired if f["write"] == write) or "never fired"))
    expected_fail = {(o.get("model"), o["date"]) for o in m.ops if o["op"] in ("disk_checkpoint", "disk_export", "corrupt")}
    failed = [a for a in m.attempts if a.rc != 0 and not a.killed and a.date not in m.faults and a.model in MODELS
              and not ((a.model, a.date) in expected_fail and a.role == "nightly")]
    claims.append(("no other run failed", not failed, ", ".join(f"{a.model} {a.date} {a.role} rc {a.rc}"
                                                                 for a in failed) or "none"))

    # the overlap
    back = [a for a in m.attempts if a.role == "backfill" and a.model == "short"]
    if back and m.when("outage"):
        night = next(a for a in m.attempts if a.model == "short" and a.role == "nightly"
                     and a.date == night_date(m.when("outage") + 1).isoformat())
        overlap = min(back[0].end, night.end) - max(back[0].start, night.start)
        waited = [line.split(" - ", 1)[-1].split(", held by")[0] for a in (back[0], night)
                  for line in Path(a.log).read_text(errors="replace").splitlines() if "waiting for the" in line]
        claims.append(("backfill overlapped the nightly run", overlap > 0 and back[0].rc == 0 and night.rc == 0,
                       f"backfill {back[0].date} {back[0].wall:.0f} s, nightly {night.date} {night.wall:.0f} s, "
                       f"overlapping {overlap:.0f} s; waited: {'; '.join(waited) or 'never'}"))

    # each day parsed once for both models
    counts = watch.counts()
    days = {str(day_file(m.logs, START + dt.timedelta(days=k))): (START + dt.timedelta(days=k)).isoformat()
            for k in range(len(m.nights) + LEAD)}
    wrong = {d: counts.get(u, 0) for u, d in days.items()
             if counts.get(u, 0) != (0 if m.faults.get(d, {}).get("fault") in PARSE_FAULTS else 1)}
    claims.append(("each day parsed once for both models", not wrong,
                   f"{sum(counts[u] for u in days)} parses stored for {len(days)} days" + (f"; wrong: {wrong}" if wrong else "")))

    # the store's size flat once the retention window is full
    decided = {model: [] for model in MODELS}
    for x, end in zip(m.nights, _night_ends(m)):
        for model in MODELS:   # the lines recorded by the time the night's size was measured (a backfill: later)
            decided[model].append(sum(1 for e in histories[model] if e.get("run") and e.get("at")
                                      and dt.datetime.fromisoformat(e["at"]).timestamp() <= end))
    full = next((i for i in range(len(m.nights)) if all(decided[k][i] > m.args.keep_nights for k in MODELS)), None)
    sizes = [x["bytes"] for x in m.nights]
    if full is not None and len(sizes) - full >= 3:
        plateau = sizes[full:]
        grow = (sizes[full] - sizes[0]) / max(1, full)
        slope = _slope(plateau)
        ok = slope <= 0.1 * grow and max(plateau) <= 1.15 * min(plateau)
        claims.append(("store size flat after the window fills", ok,
                       f"full at night {full + 1}; before: +{grow / 2**20:.2f} MiB/night; after: {slope / 2**20:+.3f} "
                       f"MiB/night (least squares), {min(plateau) / 2**20:.1f}..{max(plateau) / 2**20:.1f} MiB"))
    else:
        claims.append(("store size flat after the window fills", False if len(m.nights) >= 20 else True,
                       "the window never filled (too few nights to tell)"))

    try:
        claims += gate_claims(m, histories, counts)
    except Exception as e:   # noqa: BLE001  (a failed claim; fix it and rebuild them: --report WORK)
        claims.append(("the data gate's cases' claims computed", False, f"{type(e).__name__}: {e}"))

    _print_tables(m, histories, counts, days, fired, wall, loads)
    _chart(m, full)
    (m.work / "results.json").write_text(json.dumps({
        "nights": m.nights, "faults": m.faults, "ops": m.ops, "operator": m.operator, "hostile": hostile,
        "parse_verdicts": m.parse_verdicts, "gate": m.gate,
        "remote": remote, "remote_history": remote_lines, "schedule": m.at, "keep_nights": m.args.keep_nights,
        "champions": list(m.champions.values()), "fired": fired,
        "attempts": [a.__dict__ for a in m.attempts], "parses": dict(counts), "wall_s": round(wall),
        "claims": [{"claim": c, "ok": ok, "detail": d} for c, ok, d in claims]}, indent=1, default=str))
    print("\n| claim | holds | measured |\n|---|---|---|")
    for c, ok, d in claims:
        print(f"| {c} | {'yes' if ok else '**NO**'} | {d} |")
    print(f"\nwork folder: {m.work} (results.json, store-size.png, run-logs/, store-final/)")
    return 0 if all(ok for _, ok, _ in claims) else 1


def _night_ends(m: Month) -> list[float]:
    """When each night's store size was measured: recorded since, else the last end of the night's own runs (a night
    without runs: the night before's)."""
    ends, last = [], 0.0
    for x in m.nights:
        mine = [a.end for a in m.attempts if a.date == x["date"] and a.role != "backfill"]
        last = x.get("t_end") or max(mine + [last])
        ends.append(last)
    return ends


def report_again(work: Path) -> int:
    """``report`` of a finished month, rebuilt from its work folder."""
    saved = json.loads((work / "results.json").read_text())
    nights = len(saved["nights"])
    args = argparse.Namespace(work=str(work), nights=nights, keep_nights=saved.get("keep_nights", 7), at=None)
    m = Month(args)
    m.at = {k: v for k, v in saved["schedule"].items()}
    m.store = work / "store-final"
    m.disk = Disk(m.fs)   # the tmpfs is gone: its mount point stands for it
    m.nights, m.faults, m.ops, m.operator = saved["nights"], saved["faults"], saved["ops"], saved["operator"]
    m.parse_verdicts = saved.get("parse_verdicts") or {}
    m.gate = saved.get("gate") or m.gate
    m.attempts = [Attempt(**a) for a in saved["attempts"]]
    m.champions = {i: c for i, c in enumerate(saved["champions"])}
    for o in m.ops:   # the errors read again from the logs, as this version reads them
        if o.get("log") and o.get("rc") not in (0, None):
            o["error"] = _error_line(o["log"])
            o["traceback"] = "Traceback" in (o["error"] or "")
            o["rank_traceback"] = _rank_traceback(o["log"])
    for r in saved["remote"]:
        runs = [a for a in m.attempts if a.model == REMOTE and a.date == r["date"]]
        for a in runs:
            if a.role == "nightly":
                r["error"] = _error_line(a.log)
                r["traceback"] = "Traceback" in (r["error"] or "")
                r["rank_traceback"] = _rank_traceback(a.log)
            elif a.role == "re-run" and r.get("rerun"):
                r["rerun"]["error"] = _error_line(a.log)
    watch = ParseWatch(m.store)
    watch.counts = lambda: collections.Counter(saved["parses"])
    loads = [x["load"] for x in m.nights]
    return report(m, watch, saved["fired"], saved["wall_s"], loads, saved["hostile"], saved["remote"],
                  saved["remote_history"])


def _slope(ys: list[float]) -> float:
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))


def _print_tables(m: Month, histories, counts, days, fired, wall, loads) -> None:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\n{len(m.nights)} nights, 2 models (+ hostile, {REMOTE}), {len(m.attempts)} runs "
          f"({sum(1 for a in m.attempts if a.killed)} killed), wall {wall / 60:.1f} min, CPU of the runs and the servers "
          f"{(usage.ru_utime + usage.ru_stime) / 60:.1f} min; {platform.machine()}, {os.cpu_count()} cores, "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, {platform.platform()}, Python "
          f"{platform.python_version()}; 1-min load {min(loads):.1f}..{max(loads):.1f} (mean {sum(loads) / len(loads):.1f});"
          f" {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    mib = lambda v: f"{v / 2**20:.1f}"   # noqa: E731
    events = collections.defaultdict(list)
    for k, n in m.at.items():
        events[n].append(k)
    print("\n| night | date | events | long | short | long's champion | short's champion | store MiB | runs | datasets | "
          "parts | models | other | night s |")
    print("|---" * 14 + "|")
    for x in m.nights:
        s = x["by_folder"]
        other = sum(v for k, v in s.items() if k not in ("runs", "datasets", "_files", "models"))
        champ = {k: (v or "-").split("/")[-1].rsplit("-", 1)[0].split("-", 1)[-1] for k, v in x["champions"].items()}
        print(f"| {x['night']} | {x['date']} | {', '.join(events.get(x['night'], [])) or '-'} | "
              f"{','.join(x['decisions']['long']) or '-'} | {','.join(x['decisions']['short']) or '-'} | {champ['long']} | "
              f"{champ['short']} | {mib(x['bytes'])} | {mib(s.get('runs', 0))} | {mib(s.get('datasets', 0))} | "
              f"{mib(s.get('_files', 0))} | {mib(s.get('models', 0))} | {mib(other)} | {x['wall_s']:.0f} |")
    print("\nstore MiB after each night: " + " ".join(mib(x["bytes"]) for x in m.nights))

    print("\n| fault | day | injected | long's history line | short's history line |\n|---|---|---|---|---|")
    for date, f in sorted(m.faults.items()):
        named = f.get("named", {})
        cells = [f"{named.get(k, {}).get('decision')}: {named.get(k, {}).get('reason', '')[:220]}" for k in ("long", "short")]
        print(f"| {f['fault']} | {date} (night {f['night']}) | {f['what']} | {cells[0]} | {cells[1]} |")
    print("\n| operational fault | model, night | what was done | what the run said |\n|---|---|---|---|")
    for o in m.ops:
        done = _what_was_done(o)
        said = o.get("error") or (o.get("said") if o["op"] == "twice" else "")
        print(f"| {o['op']} | {o.get('model', '-')}, {o['date']} | {done} | {str(said)[:400]} |")

    print("\n| run | model | date | killed | rc | wall s |\n|---|---|---|---|---|---|")
    for a in m.attempts:
        if a.killed or a.role != "nightly" or a.rc != 0:
            print(f"| {a.role} | {a.model} | {a.date} | {a.killed or '-'} | {a.rc} | {a.wall:.0f} |")
    if m.gate["nights"]:
        print("\n| gate model | night | date | rc | decision | left out | reason |\n|---|---|---|---|---|---|---|")
        for r in m.gate["nights"]:
            print(f"| {r['model']} | {r['night']} | {r['date']} | {r['rc']} | {r['decision']} | "
                  f"{', '.join(r['left_out']) or '-'} | {r['reason'][:300]} |")
    if fired:
        print("\n| promotion write killed after | model | night | decision before the re-run | after |\n|---|---|---|---|---|")
        for f in fired:
            print(f"| {f['write']} | {f['model']} | {f['date']} | {f['decision'] or '(none recorded)'} | {f.get('final')} |")
    walls = [a.wall for a in m.attempts if a.role == "nightly" and a.rc == 0 and a.model in MODELS]
    if walls:
        print(f"\nnightly runs that completed: {len(walls)}, wall {min(walls):.0f}..{max(walls):.0f} s, "
              f"mean {sum(walls) / len(walls):.0f} s")
    per_day = collections.Counter(counts.get(u, 0) for u in days)
    print(f"parses stored per day: {', '.join(f'{n} parse(s): {k} day(s)' for n, k in sorted(per_day.items()))}")
    for model, lines in histories.items():
        print(f"model {model}: {len(lines)} history lines: "
              + ", ".join(f"{k} {v}" for k, v in collections.Counter(e.get('decision') for e in lines).items()))


def _what_was_done(o: dict) -> str:
    if o["op"] == "corrupt":
        return f"{Path(o.get('file', '?')).name} of {o.get('champion')}: 16 bytes inverted at byte {o.get('offset')}"
    if o["op"] in ("disk_checkpoint", "disk_export"):
        return f"disk filled ({o.get('filled')}; the champion's {o.get('sizes')})" + (
            " (no export: the champion was kept)" if o.get("no_export") else "")
    if o["op"] == "twice":
        return f"two runs, overlapping {o['overlap_s']} s"
    return f"{o['from']} -> {o['to']}"


def _chart(m: Month, full: int | None) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    xs = [x["night"] for x in m.nights]
    fig, ax = plt.subplots(figsize=(8, 4))
    tops = ["runs", "datasets", "_files", "models"]
    stacks = [[x["by_folder"].get(t, 0) / 2**20 for x in m.nights] for t in tops]
    stacks.append([(x["bytes"] - sum(x["by_folder"].get(t, 0) for t in tops)) / 2**20 for x in m.nights])
    ax.stackplot(xs, *stacks, labels=["runs", "datasets", "parsed parts (_files)", "models", "other"])
    if full is not None:
        ax.axvline(full + 1, color="k", linestyle="--", linewidth=1, label="window full")
    for f in m.faults.values():
        ax.axvline(f["night"], color="r", linewidth=0.8, alpha=0.5)
    ax.set_xlabel("night")
    ax.set_ylabel("store MiB")
    ax.set_title("store size after each night (red: bad days)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(m.work / "store-size.png", dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
