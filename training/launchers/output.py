"""The output of a rank job, read line by line as a launcher hands it over, kept for a failure message.

``RankOutput`` is the ``on_line`` of every rank job (train, evaluate, score): it splits torchrun's ``--tee`` rank
prefixes off each line (``[defaultN]:`` with ``PET_TEE=3`` on one node; ``[<node> rank<N>]:`` on several, N the
global rank: ``training.launchers.torchrun``), keeps every rank's last lines, the node it ran on, and the rest
(the launcher's own lines, or the ranks' unprefixed output). ``failure(what, code)`` says which rank failed how
and on which node, with its last lines (library warnings left out), and the first node that srun reported failed
on Slurm (``srun: error: n2: task 1: Exited with exit code 1``); without rank prefixes, the error lines of the
output (``error (rank N): ...``, ``training.distributed.run_rank``), else its last lines. The sharding plan that
rank 0 prints (``training.sharding.format_plan``: from its ``Sharding plan:`` line to its ``FITS:`` or ``DOES NOT
FIT:`` line, ~30 lines; the train flow publishes it) is not kept among them: a failure soon after it would
otherwise show the plan's rows where the error belongs.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from typing import Callable

from training.rundir import RunDir

TAIL_LINES = 30      # of each rank, for the failure message
OTHER_LINES = 200    # of the launcher's own lines (and unprefixed rank output)
SUMMARY_LINES = 12   # of a torchrun failure summary, from its "Root Cause" line: kept apart from OTHER_LINES, which
                     # a second node's traceback can flood before the first node's summary is read
# torchrun's --tee prefix (PET_TEE=3), also in mid-line after a progress bar that ended without a newline: one
# node's "[default<local rank>]:", or "[<node> rank<global rank>]:" of a job of several nodes (the space keeps it
# apart from torch's own c10 log prefix "[rank0]:W1126 ..." inside a rank's text)
RANK_PREFIX = re.compile(r"\[(?:default(\d+)|([^\s\[\]]+) rank(\d+))\]:")
# library warnings (python's "file:line: XWarning:" + its 2-space source echo, logging WARNING:, c10 W-lines)
NOISE = re.compile(r"^(WARNING:|\S+:\d+: \w*Warning: |  (?!File )\S|\[rank\d+\]:W\d{4} )")
# torchrun's failure summary (one per node): "time : 2026-11-26_14:47:46 ... rank : 1 (local_rank: 0) ... exitcode : 2"
_FAILED = re.compile(r"rank\s*:\s*(\d+) \(local_rank.*?exitcode\s*:\s*(-?\d+)", re.S)
_ROOT = re.compile(r"Root Cause.*?time\s*:\s*(\S+)", re.S)   # the summary's first observed failure, and when
# srun's report of a node whose task failed: "srun: error: n2: task 1: Exited with exit code 1" (or Killed...)
_NODE_FAILED = re.compile(r"^srun: error: (\S+): tasks? [\d,-]+: (.+)$")


class RankOutput:
    """Keeps a rank job's output for ``failure``; hands every line on to ``forward`` (when given). Subclasses
    that show the output themselves override ``segment`` and call ``keep``."""

    def __init__(self, forward: Callable[[str], None] | None = None):
        self.forward = forward
        self.tails: dict[int, deque] = defaultdict(lambda: deque(maxlen=TAIL_LINES))
        self.nodes: dict[int, str] = {}   # rank -> node, for jobs of several nodes
        self.launcher: deque = deque(maxlen=OTHER_LINES)
        self.node_exits: dict[str, str] = {}   # node -> how its task ended, as srun reported it (in its order)
        self.summaries: deque[list[str]] = deque(maxlen=16)   # torchrun's failure summaries (one per node)
        self._in_plan: set[int | None] = set()   # the ranks (None: unprefixed output) printing their plan now

    def __call__(self, line: str) -> None:
        rank = None
        for part in line.split("\r"):  # tqdm redraws; a "\r" part continues the rank before it
            at = 0
            for m in RANK_PREFIX.finditer(part):
                self.segment(rank, part[at:m.start()])
                rank = int(m.group(1) if m.group(1) is not None else m.group(3))
                if m.group(2):
                    self.nodes[rank] = m.group(2)
                at = m.end()
            self.segment(rank, part[at:])
        if rank is None and (m := _NODE_FAILED.match(line)):
            self.node_exits.setdefault(m.group(1), m.group(2).strip())
        if rank is None and "Root Cause" in line:
            self.summaries.append([line])
        elif rank is None and self.summaries and len(self.summaries[-1]) < SUMMARY_LINES:
            self.summaries[-1].append(line)
        if self.forward:
            self.forward(line)

    def tag(self, rank: int) -> str:
        """``rank 1 on n2`` (a job of several nodes), else ``rank 1``."""
        return f"rank {rank} on {self.nodes[rank]}" if rank in self.nodes else f"rank {rank}"

    def segment(self, rank: int | None, text: str) -> None:
        """One piece of a line: ``text`` of ``rank`` (None: not a rank's, or no prefixes)."""
        if text.strip():
            self.keep(rank, text)

    def keep(self, rank: int | None, text: str) -> None:
        if not self._plan_line(rank, text.strip()):
            (self.launcher if rank is None else self.tails[rank]).append(text)

    def _plan_line(self, rank: int | None, body: str) -> bool:
        """Whether ``body`` is a line of the sharding plan that ``rank`` is printing: from its header line to its
        verdict line. An error is never one (torchrun reads a rank's stderr apart from its stdout, so it may come
        amid them): a rank's one-line ``error ...`` is kept, a ``Traceback`` ends the plan (its lines are kept)."""
        if body.startswith(RunDir.PLAN_HEADER):
            self._in_plan.add(rank)
            return True
        if rank not in self._in_plan or body.startswith("error"):
            return False
        if body.startswith("Traceback") or body.startswith(RunDir.PLAN_VERDICTS):
            self._in_plan.discard(rank)
            return not body.startswith("Traceback")
        return True

    def failure(self, what: str, code: int) -> str:
        """``<what> failed``: the failing rank, its node and how it ended, how srun saw that node end (Slurm), and
        the rank's last lines; without rank prefixes, the error lines or the last lines of the output. The failing
        rank is the root cause of a torchrun failure summary: one killed by a signal first (its peers fail after it),
        then the earliest, then the one on the node srun reported first (a node's summary can come after its peers'
        failed, and srun may report the peers' node first); without a summary, a rank of the first node srun
        reported."""
        order = list(self.node_exits)
        if not self.tails:
            lines = _merge_rank_errors([ln for ln in self.launcher if ln.startswith("error")]) \
                or list(self.launcher)[-20:]
            return f"{what} failed (torchrun exit code {code}{self._srun(order[0] if order else None)}):\n" + \
                "\n".join(lines)
        summaries = []   # (exit code >= 0, time, srun's order of the node, appearance, rank, exit code)
        kept = "\n".join(line for summary in self.summaries for line in summary)
        for i, root in enumerate(_ROOT.finditer(kept)):
            if found := _FAILED.search(kept, root.start()):
                rank, exit_code = int(found.group(1)), int(found.group(2))
                node = self.nodes.get(rank)
                summaries.append((exit_code >= 0, root.group(1), order.index(node) if node in order else len(order),
                                  i, rank, exit_code))
        if summaries:
            *_, rank, exit_code = min(summaries)
            how = f"exit code {exit_code}" + (f" (killed by signal {-exit_code})" if exit_code < 0 else "")
        else:
            rank = next((r for r in sorted(self.tails) if order and self.nodes.get(r) == order[0]), min(self.tails))
            how = f"torchrun exit code {code}"
        node = self.nodes.get(rank)
        where = f"rank {rank} on node {node}" if node else f"rank {rank}"
        tail = "\n".join(t for t in self.tails.get(rank, []) if not NOISE.match(t))
        return (f"{what} failed: {where}, {how}{self._srun(node if node in order else order[0] if order else None)}."
                f" Last lines of rank {rank}:\n{tail or '(only progress bars and library warnings)'}\n")

    def _srun(self, node: str | None) -> str:
        return f"; srun: node {node}: {self.node_exits[node]}" if node else ""


_RANK_ERROR = re.compile(r"^error \(rank (\d+)\): (.*)$")


def _merge_rank_errors(lines: list[str]) -> list[str]:
    """``error (rank N): ...`` lines that say the same on several ranks as one ``error (ranks 0, 1): ...`` line
    (a check that every rank makes fails on all of them alike)."""
    ranks: dict[str, list[str]] = {}
    out: list[str | None] = []
    for line in lines:
        if m := _RANK_ERROR.match(line):
            if m.group(2) not in ranks:
                ranks[m.group(2)] = []
                out.append(m.group(2))
            ranks[m.group(2)].append(m.group(1))
        else:
            out.append(line)
    return [line if line not in ranks else
            f"error (rank{'s' if len(ranks[line]) > 1 else ''} {', '.join(sorted(ranks[line], key=int))}): {line}"
            for line in out]
