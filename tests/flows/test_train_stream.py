"""The train flow's reader of torchrun's output (``flows.train._Stream``) on lines recorded from a real
2-rank run: bars drive the progress, evaluation results are logged (also when they follow a bar in the same
line, or come as a "\\r" segment), known library warnings in the run's library log and others at WARNING, the
plan published instead of logged; and from a 2-node
Slurm job: each rank tagged with its node, the failure message naming the node and srun's report of it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from flows import artifacts, train
from training.rundir import RunDir

PLAN = """Sharding plan: 2 ranks (1 node(s) x 2), device cpu
table                              rows   dim  sharding          kernel             ranks
t_c1                                200    16  table_wise        fused              1

Memory per rank (embedding weights + rowwise_adagrad state, GiB; equal ranks grouped):
  ranks    HBM used / capacity    DDR used / capacity
    0,1                      -       0.00 /     11.77
FITS: the fullest rank uses 0% of its memory for embeddings (the rest holds the dense model, activations and buffers).
"""
BAR = "train:  38%|███▊      | 3/8 [00:00<00:01,  4.58step/s, loss=0.8531, samples_s=4,958]"
RECORDED = [  # as run_command hands them over (text mode: "\r" already ended a line)
    "[default0]:WARNING:root:Sharding spec not found for .t_c0",
    *(f"[default0]:{line}" for line in PLAN.splitlines()),
    "[default0]:train:   0%|          | 0/8 [00:00<?, ?step/s][rank0]:W1123 17:36:43.273000 5807 "
    ".venv/lib/python3.11/site-packages/torch/fx/_symbolic_trace.py:56] is_fx_tracing will return true",
    "[default1]:/x/torch/autograd/graph.py:979: UserWarning: fbgemm::dense_embedding_codegen_lookup_function: "
    "an autograd kernel was not registered",
    "[default1]:  return Variable._execution_engine.run_backward(  # Calls into the C++ engine",
    "[default0]:                                              ",
    f"[default0]:{BAR}[default0]:step 3: val auc 0.7727 logloss 0.6469",
    # tqdm.write as a reader that keeps "\r" sees it: the bar, the cleared bar, the line
    "[default0]:\rtrain:  75%|███████▌  | 6/8 [00:00<00:00,  7.49step/s, loss=0.5608]\r          \r"
    "step 6: val auc 0.7873 logloss 0.5302",
    "[default0]:done: 8 steps",
    "W1123 17:36:50 torch/distributed/run.py: launcher line",
]


class Recorder:
    def __init__(self):
        self.progress, self.curves, self.logs = [], [], []

    def update(self, done=None, total=None, upto_step=None):  # Progress.update and TrainingCurve.update
        if done is None:
            self.curves.append(upto_step)
        else:
            self.progress.append((done, total))

    def log(self, level):
        return lambda msg, *args: self.logs.append((level, msg % args if args else msg))


@pytest.fixture()
def stream(tmp_path, monkeypatch):
    run = RunDir(str(tmp_path))
    run.write_text(PLAN, RunDir.PLAN)
    published = []
    monkeypatch.setattr(artifacts, "plan", lambda r: published.append(r.uri) or r.read_text(RunDir.PLAN))
    rec = Recorder()
    logger = SimpleNamespace(info=rec.log(logging.INFO), warning=rec.log(logging.WARNING))
    s = train._Stream(logger, rec, run, rec)
    for line in RECORDED:
        s(line)
    return s, rec, published


def test_evaluations_logged_bars_drive_progress(stream):
    s, rec, _ = stream
    infos = [m for level, m in rec.logs if level == logging.INFO]
    assert "[rank 0] step 3: val auc 0.7727 logloss 0.6469" in infos
    assert "[rank 0] step 6: val auc 0.7873 logloss 0.5302" in infos
    assert rec.curves == [3, 6] and rec.progress == [(0, 8), (3, 8), (6, 8)]   # the curve up to each evaluation
    assert "[rank 0] done: 8 steps" in infos and "W1123 17:36:50 torch/distributed/run.py: launcher line" in infos
    assert not [m for m in infos if "train:" in m or "%|" in m]


def test_warnings_at_warning_and_plan_published_not_logged(stream):
    """Known library warnings (training.launchers.output.KNOWN_WARNINGS) go to the run's library log, also one after
    a bar in the same line; other library warnings are logged at WARNING; the plan's indented rows are not."""
    s, rec, published = stream
    warnings = [m for level, m in rec.logs if level == logging.WARNING]
    assert len(warnings) == 2 and all(m.startswith("[rank 1] ") for m in warnings)   # a UserWarning, its source line
    assert "UserWarning" in warnings[0] and "run_backward" in warnings[1]
    library = (Path(s.run.uri) / RunDir.LIBRARY_LOG).read_text().splitlines()
    assert library[1:] == ["[rank 0] WARNING:root:Sharding spec not found for .t_c0",
                           "[rank 0] [rank0]:W1123 17:36:43.273000 5807 .venv/lib/python3.11/site-packages/torch/fx/"
                           "_symbolic_trace.py:56] is_fx_tracing will return true"]
    assert library[0].startswith("== training, ") and s.library.count == 2
    assert published == [s.run.uri]
    logged = "\n".join(m for _, m in rec.logs)
    assert "t_c1" not in logged and "table " not in logged and "HBM used" not in logged
    assert "Sharding spec" not in logged and "is_fx_tracing" not in logged
    assert "sharding plan published (artifact 'sharding-plan'): FITS: the fullest rank" in logged


def test_failure_message_keeps_text_not_bars_or_warnings_or_the_plan(stream):
    s, _, _ = stream
    message = s.failure("training", 1)
    assert "rank 0" in message and "step 6: val auc" in message and "done: 8 steps" in message
    assert "%|" not in message and "WARNING" not in message
    assert not [line for line in PLAN.splitlines() if line.strip() and line in message]


def test_a_ranks_error_amid_its_plan_is_kept(tmp_path):
    """torchrun reads a rank's stderr apart from its stdout: its error line may come amid the plan's lines."""
    plan = [f"[default1]:{line}" for line in PLAN.splitlines()]
    s, _ = _read(["[default1]:reading /runs/r/checkpoints/8", *plan[:3], "[default1]:error (rank 1): boom",
                  *plan[3:], "[default1]:step 3: val auc 0.7727 logloss 0.6469"], tmp_path)
    assert s.failure("training", 2) == ("training failed: rank 1, torchrun exit code 2. Last lines of rank 1:\n"
                                        "reading /runs/r/checkpoints/8\nerror (rank 1): boom\n"
                                        "step 3: val auc 0.7727 logloss 0.6469\n")


# two Slurm nodes, one rank each (recorded from tests/e2e/test_slurm.py): each rank tagged with its node and global
# rank; rank 1 on n2 killed by SIGKILL, then both nodes' torchrun failure summaries (n1's first) and srun's reports
SUMMARY = ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-26_14:30:19",
           "  host      : localhost", "  rank      : {rank} (local_rank: 0)", "  exitcode  : {code} (pid: 9806)",
           "  error_file: <N/A>"]
TWO_NODES = [
    "dlrmflow: train job 17 on Slurm, 2 node(s) x 1 rank(s), rendezvous n1:29500, run /runs/r",
    "[n2 rank1]:WARNING:torchrec.distributed.utils:Sharding Type is data_parallel, caching params will be ignored",
    "[n2 rank1]:[rank1]:W1126 14:30:14.362000 9806 torch/fx/_symbolic_trace.py:56] is_fx_tracing will return true",
    "[n1 rank0]:train:   0%|          | 0/160 [00:00<?, ?step/s][rank0]:W1126 14:30:14.412000 9809 "
    "torch/fx/_symbolic_trace.py:56] is_fx_tracing will return true",
    "[n2 rank1]:reading /runs/r/checkpoints/8",
    f"[n1 rank0]:{BAR}[n1 rank0]:step 3: val auc 0.7727 logloss 0.6469",
    *(line.format(rank=0, code=1) for line in SUMMARY),
    *(line.format(rank=1, code=-9) for line in SUMMARY),
    "srun: error: n2: task 1: Exited with exit code 1",
    "srun: launch/slurm: _step_signal: Terminating StepId=17.0",
    "srun: error: n1: task 0: Terminated",
    "dlrmflow: Slurm job 17 finished with exit code 143",
]


def _read(lines, tmp_path):
    rec = Recorder()
    logger = SimpleNamespace(info=rec.log(logging.INFO), warning=rec.log(logging.WARNING))
    s = train._Stream(logger, rec, RunDir(str(tmp_path)), rec)
    for line in lines:
        s(line)
    return s, rec


def test_ranks_of_several_nodes_are_tagged_with_their_node(tmp_path):
    s, rec = _read(TWO_NODES, tmp_path)
    assert s.nodes == {0: "n1", 1: "n2"} and rec.progress == [(0, 160), (3, 8)]
    assert (logging.INFO, "[rank 1 on n2] reading /runs/r/checkpoints/8") in rec.logs
    assert (logging.INFO, "[rank 0 on n1] step 3: val auc 0.7727 logloss 0.6469") in rec.logs
    library = (tmp_path / RunDir.LIBRARY_LOG).read_text()   # known warnings, tagged; c10's "[rank1]:" stays text
    assert "[rank 1 on n2] [rank1]:W1126 14:30:14.362000 9806 torch/fx/_symbolic_trace.py:56] is_fx_tracing will " \
           "return true\n" in library and "\n[rank 0 on n1] [rank0]:W1126 14:30:14.412000" in library
    assert "[rank 1 on n2] WARNING:torchrec.distributed.utils:Sharding Type is data_parallel" in library
    assert not [m for level, m in rec.logs if level == logging.WARNING]
    assert s.failure("training", 143) == (
        "training failed: rank 1 on node n2, exit code -9 (killed by signal 9); srun: node n2: Exited with exit code 1."
        " Last lines of rank 1:\nreading /runs/r/checkpoints/8\n")


def _summary(rank: int, code: int, time: str = "2026-11-26_14:30:19") -> list[str]:
    return [line.format(rank=rank, code=code).replace("2026-11-26_14:30:19", time) for line in SUMMARY]


SRUN_N1_FIRST = ["srun: error: n1: task 0: Exited with exit code 1", "srun: error: n2: task 1: Terminated"]


@pytest.mark.parametrize("summaries, srun, failed", [
    # recorded: the killed rank's torchrun was still ending when srun saw the other node fail and terminated it
    (_summary(1, -9) + _summary(0, 1), SRUN_N1_FIRST, "rank 1 on node n2, exit code -9 (killed by signal 9); srun: "
                                                      "node n2: Terminated"),
    (_summary(0, 1, "2026-11-26_14:30:20") + _summary(1, 1), SRUN_N1_FIRST, "rank 1 on node n2, exit code 1; srun: "
                                                                            "node n2: Terminated"),   # the earliest
    (_summary(1, 1) + _summary(0, 1), SRUN_N1_FIRST, "rank 0 on node n1, exit code 1; srun: node n1: Exited with exit "
                                                     "code 1"),   # a tie: the node srun reported first
    # recorded in a clean-clone run: the killed rank's summary came first, then the other node's long traceback
    (_summary(1, -9) + ["E1126 16:09:21.609000 25609 api.py:836] traceback line"] * 300 + _summary(0, 1),
     SRUN_N1_FIRST, "rank 1 on node n2, exit code -9 (killed by signal 9); srun: node n2: Terminated"),
], ids=["signal", "earliest", "srun-first", "summary-before-a-long-traceback"])
def test_the_failing_rank_of_several_nodes(summaries, srun, failed, tmp_path):
    lines = [line for line in TWO_NODES if not line.startswith(("srun:", " ", "Root Cause", "[0]:"))]
    s, _ = _read(lines + summaries + srun, tmp_path)
    rank = failed.split()[1]
    assert s.failure("training", 143).startswith(f"training failed: {failed}. Last lines of rank {rank}:\n")


def test_without_a_failure_summary_the_failing_node_srun_reported_names_the_rank(tmp_path):
    """A node's torchrun itself killed (no summary): srun's report names the node, whose rank is the failing one."""
    s, _ = _read([line for line in TWO_NODES if not line.startswith(" ") and "Root Cause" not in line
                  and line != "[0]:"], tmp_path)
    assert s.failure("training", 143).startswith("training failed: rank 1 on node n2, torchrun exit code 143; srun: "
                                                 "node n2: Exited with exit code 1. Last lines of rank 1:\n")


def test_a_node_that_fails_before_its_ranks_start_is_named_with_its_lines(tmp_path):
    s, _ = _read(["dlrmflow: rendezvous host 'n9' (from --rdzv-endpoint n9:29500) does not resolve on n2. Fix: ...",
                  "srun: error: n2: task 1: Exited with exit code 1"], tmp_path)
    message = s.failure("training", 1)
    assert message.startswith("training failed (torchrun exit code 1; srun: node n2: Exited with exit code 1):\n")
    assert "rendezvous host 'n9' (from --rdzv-endpoint n9:29500) does not resolve on n2" in message


def test_the_curve_is_rewritten_at_each_evaluation_however_late_its_line_is_read(tmp_path, monkeypatch):
    """Both evaluations are in metrics.jsonl before the first one's line is read (a fast run, a slow reader): the
    card shows the first, then is rewritten with the second; the end changes nothing more."""
    run = RunDir(str(tmp_path))
    records = [{"step": 3, "epoch": 0, "loss": 0.6}, {"step": 3, "epoch": 0, "eval_split": "val", "auc": 0.7,
               "logloss": 0.6, "rows": 10}, {"step": 6, "epoch": 0, "loss": 0.5},
               {"step": 6, "epoch": 0, "eval_split": "val", "auc": 0.75, "logloss": 0.55, "rows": 10}]
    run.write_text("".join(json.dumps(r) + "\n" for r in records), RunDir.METRICS)
    curve = artifacts.TrainingCurve(run, "auc")
    shown = []
    monkeypatch.setattr(curve, "_put", lambda cls, key, description, **content:
                        shown.append([r["step"] for r in content["table"]]) if "table" in content else None)
    for line in ("step 3: val auc 0.7000 logloss 0.6000", "step 6: val auc 0.7500 logloss 0.5500"):
        curve.update(upto_step=int(train._EVAL.match(line).group(1)))
    curve.update()   # after the run
    assert shown == [[3], [3, 6]]
