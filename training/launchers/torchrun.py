"""torchrun whose ranks start with their imports done: ``python -m training.launchers.torchrun ARGS``
takes torchrun's own arguments and runs torch's torchrun (``torch.distributed.run``: the same rendezvous,
restarts, ``--tee`` prefixes and failure summary). On a CPU-only torch build it first imports what every rank
job imports (``PRELOAD``: torch, TorchRec, the trainer: ~4 CPU-seconds), then forks the ranks from this process
and runs the rank module's file (``-m MODULE``, or a script) as ``__main__`` in each, instead of starting a
fresh interpreter per rank that imports it all again. A build with GPU support starts the ranks as torchrun
does (a new interpreter each): a forked rank could not use a CUDA/HIP context, so nothing may touch the GPU
before the ranks do."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import torch
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import MultiprocessContext, RunProcsResult
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure, record

PRELOAD = ("training.trainer",)
FORKED = "DLRMFLOW_FORKED_RANK"   # set in a forked rank's environment: how it ends (``training.distributed.exit``)


def forks_ranks() -> bool:
    """Whether ranks are forked from the launcher: only on a torch build without CUDA or ROCm support."""
    return torch.version.cuda is None and torch.version.hip is None


def _fork_from_here(args) -> None:
    """Import ``PRELOAD`` here, and make torchrun fork the ranks and run the rank module's file as ``__main__``
    in each (``--run-path``; an exit code of 0 there is a normal return)."""
    for name in PRELOAD:
        importlib.import_module(name)
    if args.module:
        args.training_script = importlib.util.find_spec(args.training_script).origin
    args.module, args.run_path, args.start_method = False, True, "fork"
    os.environ[FORKED] = "1"
    MultiprocessContext._poll = _report_every_failed_rank(MultiprocessContext._poll)
    sys.stdout.flush()
    sys.stderr.flush()


def _report_every_failed_rank(poll):
    """torch's poll of forked ranks reports one failed rank, the first it looks at; torchrun's subprocess ranks
    report every rank that had failed by then. Report them all, a rank killed by a signal first (on a tie of
    timestamps it is the root cause: a rank that dies takes its peers' collectives down with it, not the other
    way round), so the failure summary names the rank that died, as with torchrun."""
    def report(self) -> RunProcsResult | None:
        failed = {i: p.exitcode for i, p in enumerate(self._pc.processes if self._pc else []) if p.exitcode}
        result = poll(self)
        if result is None or not result.failures:
            return result
        for i, code in failed.items():
            if i not in result.failures:
                result.failures[i] = ProcessFailure(local_rank=i, pid=self._pc.processes[i].pid, exitcode=code,
                                                    error_file=self.error_files[i])
        result.failures = dict(sorted(result.failures.items(), key=lambda kv: (kv[1].exitcode >= 0, kv[0])))
        return result
    return report


@record
def main(argv: list[str] | None = None) -> None:
    args = torchrun.parse_args(argv)
    if forks_ranks() and not args.no_python:
        _fork_from_here(args)
    torchrun.run(args)


if __name__ == "__main__":
    main()
