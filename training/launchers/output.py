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
otherwise show the plan's rows where the error belongs. Given the run (``run=``), the known, harmless library
warnings (``KNOWN_WARNINGS``) go to the run's library log (``LibraryLog``: ``RunDir.LIBRARY_LOG``), not on.
"""

from __future__ import annotations

import os
import re
import time
from collections import defaultdict, deque
from typing import Callable

from fsspec.implementations.local import LocalFileSystem

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
# The library warnings every job of a run prints that say nothing about the run, each a regex of the whole warning
# (wherever it starts in a rank's line), with why it is harmless. A rank job's reader (``RankOutput`` given the run)
# writes them to the run's library log (``RunDir.LIBRARY_LOG``) instead of the console or the flow's logs.
KNOWN_WARNINGS = (
    # TorchRec, once per data-parallel table and rank: a small table the planner replicates has no embedding cache
    # to configure, so the sharder's caching params are rightly not applied to it
    r"WARNING:torchrec\.distributed\.utils:Sharding Type is data_parallel, caching params will be ignored\s*$",
    # TorchRec's DMP, once per data-parallel table: a replicated table has no ShardingSpec (a sharded tensor's
    # layout); its state dict entry is a plain tensor, saved and loaded as one
    r"WARNING:root:Sharding spec not found for \S+\s*$",
    # torch (a c10 W-line), once per rank: TorchRec calls the deprecated is_fx_tracing(); nothing is fx-traced here
    r"(\[rank\d+\]:)?W\d{4} [^\]]*\] is_fx_tracing will return true.*$",
)
KNOWN = re.compile("|".join(f"(?:{pattern})" for pattern in KNOWN_WARNINGS))
LIBRARY_LINES = 20_000   # of one job, in the library log (then counted only)
# torchrun's failure summary (one per node): "time : 2026-11-26_14:47:46 ... rank : 1 (local_rank: 0) ... exitcode : 2"
_FAILED = re.compile(r"rank\s*:\s*(\d+) \(local_rank.*?exitcode\s*:\s*(-?\d+)", re.S)
_ROOT = re.compile(r"Root Cause.*?time\s*:\s*(\S+)", re.S)   # the summary's first observed failure, and when
# srun's report of a node whose task failed: "srun: error: n2: task 1: Exited with exit code 1" (or Killed...)
_NODE_FAILED = re.compile(r"^srun: error: (\S+): tasks? [\d,-]+: (.+)$")


class RankOutput:
    """Keeps a rank job's output for ``failure``; hands every line on to ``forward`` (when given). Subclasses
    that show the output themselves override ``segment`` and call ``keep``."""

    def __init__(self, forward: Callable[[str], None] | None = None, *, run: RunDir | str | None = None,
                 job: str = "job"):
        self.forward = forward
        self.library = LibraryLog(run, job) if run is not None else None   # where KNOWN warnings go, when given
        self.tails: dict[int, deque] = defaultdict(lambda: deque(maxlen=TAIL_LINES))
        self.nodes: dict[int, str] = {}   # rank -> node, for jobs of several nodes
        self.launcher: deque = deque(maxlen=OTHER_LINES)
        self.node_exits: dict[str, str] = {}   # node -> how its task ended, as srun reported it (in its order)
        self.summaries: deque[list[str]] = deque(maxlen=16)   # torchrun's failure summaries (one per node)
        self._in_plan: set[int | None] = set()   # the ranks (None: unprefixed output) printing their plan now

    def __call__(self, line: str) -> None:
        rank, known = None, []
        for part in line.split("\r"):  # tqdm redraws; a "\r" part continues the rank before it
            at, start = 0, 0
            for m in RANK_PREFIX.finditer(part):
                known += self._piece(rank, part[start:at], part[at:m.start()])
                rank = int(m.group(1) if m.group(1) is not None else m.group(3))
                if m.group(2):
                    self.nodes[rank] = m.group(2)
                at, start = m.end(), m.start()
            known += self._piece(rank, part[start:at], part[at:])
        if rank is None and (m := _NODE_FAILED.match(line)):
            self.node_exits.setdefault(m.group(1), m.group(2).strip())
        if rank is None and "Root Cause" in line:
            self.summaries.append([line])
        elif rank is None and self.summaries and len(self.summaries[-1]) < SUMMARY_LINES:
            self.summaries[-1].append(line)
        for text in known:   # the line without its known warnings, if anything is left
            line = line.replace(text, "", 1)
        if known and not line.strip():
            return
        if self.library is not None:
            self.library.flush()   # the warnings before this line are in the file by now
        if self.forward:
            self.forward(line)

    def _piece(self, rank: int | None, prefix: str, text: str) -> list[str]:
        """Hands ``text`` of ``rank`` (after its rank ``prefix``) to ``segment``, less a KNOWN warning in it, which
        goes to the library log; returns what to cut from the line shown ([] when nothing)."""
        found = KNOWN.search(text) if self.library is not None else None
        if found is None:
            self.segment(rank, text)
            return []
        self.library.add(f"[{self.tag(rank)}] {found.group(0).strip()}" if rank is not None else found.group(0).strip())
        kept = text[:found.start()]
        self.segment(rank, kept)
        return [text[found.start():]] if kept.strip() else [prefix + text]

    def close(self) -> None:
        """The job has ended: the library log's last lines are written (a remote run's)."""
        if self.library is not None:
            self.library.close()

    def noise(self, rank: int | None, text: str) -> bool:
        """Whether ``text`` (of ``rank``, already ``keep``-ed) is a library warning (``NOISE``) and not a line of the
        sharding plan that ``rank`` is printing (whose indented rows look like a Python warning's source line)."""
        return bool(NOISE.match(text)) and rank not in self._in_plan

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


class LibraryLog:
    """A run's library log (``RunDir.LIBRARY_LOG``): the KNOWN warnings of its rank jobs, each job's under a header
    line, added to what its earlier jobs left there. ``flush`` writes what was added (``RankOutput`` calls it at the
    job's next line of its own, and ``close``): a local file is appended to, a remote one rewritten whole."""

    def __init__(self, run: RunDir | str, job: str):
        self.run, self.job = RunDir(run), job
        self.lines: list[str] = []
        self.count = 0         # the known warnings of this job
        self.written = 0       # of self.lines
        self._before: str | None = None   # what the file held when this job began (a remote file's)

    def add(self, line: str) -> None:
        self.count += 1
        if not self.lines:
            self.lines.append(f"== {self.job}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}: known library warnings, "
                              "harmless (training.launchers.output.KNOWN_WARNINGS)")
        if self.count <= LIBRARY_LINES:
            self.lines.append(line)
        if isinstance(self.run.fs, LocalFileSystem):   # appended at once; a remote file at the job's next line
            self.flush()

    def flush(self) -> None:
        """Write the lines added since the last flush (best-effort: a library log never fails a job)."""
        if self.written == len(self.lines):
            return
        try:
            if isinstance(self.run.fs, LocalFileSystem):
                path = self.run.path(RunDir.LIBRARY_LOG)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "a") as f:
                    f.write("".join(line + "\n" for line in self.lines[self.written:]))
            else:
                if self._before is None:
                    self._before = self.run.read_text(RunDir.LIBRARY_LOG) if self.run.exists(RunDir.LIBRARY_LOG) \
                        else ""
                self.run.write_text(self._before + "".join(line + "\n" for line in self.lines), RunDir.LIBRARY_LOG)
            self.written = len(self.lines)
        except Exception:   # noqa: BLE001  a store hiccup: the warnings are not worth a failed job
            pass

    def close(self) -> None:
        """The last flush, with the count of the warnings past ``LIBRARY_LINES``."""
        if self.count > LIBRARY_LINES:
            self.lines.append(f"== and {self.count - LIBRARY_LINES:,} more known warnings")
        self.flush()


def library_note(run: RunDir | str, count: int | None = None) -> str | None:
    """The line a command ends with: where the run's known library warnings went (``count`` of them, when known);
    None when its library log holds none."""
    run = RunDir(run)
    if count == 0 or (count is None and not run.exists(RunDir.LIBRARY_LOG)):
        return None
    many = f"{count:,} known library warnings" if count is not None else "known library warnings"
    return f"{many} (harmless) are in {run.join(RunDir.LIBRARY_LOG)}"


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
