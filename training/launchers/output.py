"""The output of a rank job, read line by line as a launcher hands it over, kept for a failure message.

``RankOutput`` is the ``on_line`` of every rank job (train, evaluate, score): it splits torchrun's
``--tee`` rank prefixes (``[defaultN]:``, with ``PET_TEE=3``) off each line, keeps every rank's last lines and
the rest (the launcher's own lines, or the ranks' unprefixed output), and ``failure(what, code)`` says which rank
failed how, with its last lines (library warnings left out); without rank prefixes, the error lines of the
output (``error (rank N): ...``, ``training.distributed.run_rank``), else its last lines.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from typing import Callable

TAIL_LINES = 30      # of each rank, for the failure message
OTHER_LINES = 200    # of the launcher's own lines (and unprefixed rank output)
# torchrun --tee prefix (PET_TEE=3); also in mid-line, after a progress bar that ended without a newline
RANK_PREFIX = re.compile(r"\[default(\d+)\]:")
# library warnings (python's "file:line: XWarning:" + its 2-space source echo, logging WARNING:, c10 W-lines)
NOISE = re.compile(r"^(WARNING:|\S+:\d+: \w*Warning: |  (?!File )\S|\[rank\d+\]:W\d{4} )")
# torchrun's failure summary: "rank : 1 (local_rank: 1) ... exitcode : 2"
_FAILED = re.compile(r"rank\s*:\s*(\d+) \(local_rank.*?exitcode\s*:\s*(-?\d+)", re.S)


class RankOutput:
    """Keeps a rank job's output for ``failure``; hands every line on to ``forward`` (when given). Subclasses
    that show the output themselves override ``segment`` and call ``keep``."""

    def __init__(self, forward: Callable[[str], None] | None = None):
        self.forward = forward
        self.tails: dict[int, deque] = defaultdict(lambda: deque(maxlen=TAIL_LINES))
        self.launcher: deque = deque(maxlen=OTHER_LINES)

    def __call__(self, line: str) -> None:
        rank = None
        for part in line.split("\r"):  # tqdm redraws; a "\r" part continues the rank before it
            for i, piece in enumerate(RANK_PREFIX.split(part)):  # [text, rank, text, rank, text, ...]
                if i % 2:
                    rank = int(piece)
                else:
                    self.segment(rank, piece)
        if self.forward:
            self.forward(line)

    def segment(self, rank: int | None, text: str) -> None:
        """One piece of a line: ``text`` of ``rank`` (None: not a rank's, or no prefixes)."""
        if text.strip():
            self.keep(rank, text)

    def keep(self, rank: int | None, text: str) -> None:
        (self.launcher if rank is None else self.tails[rank]).append(text)

    def failure(self, what: str, code: int) -> str:
        """``<what> failed``: the failing rank (torchrun's failure summary, else the lowest rank that wrote) and
        how, with its last lines; without rank prefixes, the error lines or the last lines of the output."""
        text = "\n".join(self.launcher)
        found = _FAILED.search(text[text.find("Root Cause"):] if "Root Cause" in text else text)
        if not self.tails:
            lines = [ln for ln in self.launcher if ln.startswith("error")] or list(self.launcher)[-20:]
            return f"{what} failed (torchrun exit code {code}):\n" + "\n".join(lines)
        rank = int(found.group(1)) if found else min(self.tails)
        how = f"exit code {found.group(2)}" if found else f"torchrun exit code {code}"
        if found and int(found.group(2)) < 0:
            how += f" (killed by signal {-int(found.group(2))})"
        tail = "\n".join(t for t in self.tails.get(rank, []) if not NOISE.match(t))
        return (f"{what} failed: rank {rank}, {how}. Last lines of rank {rank}:\n"
                f"{tail or '(only progress bars and library warnings)'}\n")
