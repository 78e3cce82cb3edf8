"""Process group, device and backend: chosen here, once, from the hardware.

``cuda`` when a GPU is visible (ROCm builds present as ``cuda`` too) with ``nccl`` (RCCL on
ROCm); otherwise ``cpu`` with ``gloo``. The process group gets a finite timeout so that one
rank's failure ends the job instead of leaving the others waiting in a collective forever.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from common.errors import UserError
from training.launchers.torchrun import FORKED


@dataclass(frozen=True)
class DistEnv:
    """Where this process runs: its ranks, its device and the collective backend."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def choose_device(local_rank: int = 0) -> torch.device:
    """``cuda:<local_rank>`` when a GPU is visible, else ``cpu``."""
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def backend_for(device: torch.device) -> str:
    """``nccl`` (RCCL on ROCm) for GPUs, ``gloo`` for CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def init(timeout_s: float) -> DistEnv:
    """Join (or create) the default process group from torchrun's environment, with a collective
    timeout of ``timeout_s`` (the config's ``pg_timeout_s``).

    Without torchrun's variables this is a one-process group with an in-process store, so the
    same code runs from a notebook or a test.
    """
    alone = "MASTER_ADDR" not in os.environ   # torchrun always sets it
    if alone:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = choose_device(local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    quiet_fbgemm_warnings()
    backend = backend_for(device)
    if not dist.is_initialized():
        # alone: an in-process store, no port (a free port picked here can be taken before the store binds it)
        store = {"store": dist.HashStore()} if alone else {}
        dist.init_process_group(backend=backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s),
                                **store)
    return DistEnv(rank, world, local_rank, local_world, device, backend)


# FBGEMM's warnings that say nothing to act on, repeated at backward steps. The first: FBGEMM's dense TBE op
# (data_parallel tables) has its autograd inside its kernels, which torch >= 2.11 flags on CPU and CUDA alike; its
# CUDA gradient equals the CPU kernel's (benchmarks/bench_gpu.py kernel_parity, on an H100: benchmarks/RESULTS.md).
FBGEMM_NOISE = (r"fbgemm::dense_embedding_codegen_lookup_function: an autograd kernel was not registered",
                r"TBE B200 optimization: ")


def quiet_fbgemm_warnings() -> None:
    """Ignore ``FBGEMM_NOISE`` in this process."""
    import warnings

    for message in FBGEMM_NOISE:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)


def run_rank(work: Callable[[], None], run: str | None = None) -> int:
    """Run one rank's ``work``; returns its exit code: 0, or 2 after printing a one-line error (``error (rank N):
    ...``, which the launcher's failure message shows) for a UserError, a store that cannot be used
    (``common.store_errors.store_error``: an S3 endpoint lost or not answering, a read-only store; the store of the run
    folder ``run`` named) or a full disk (``common.space``: NoSpace naming the file, else ``run``). Always leaves
    the process group."""
    if "RANK" in os.environ:
        name_process(f"dlrmflow-rank{os.environ['RANK']}")
    try:
        work()
        return 0
    except Exception as e:
        error = e if isinstance(e, UserError) else _named(e, run)
        if error is None:
            raise
        # one write: the ranks share stderr, and a print's line and newline could interleave with another rank's
        sys.stderr.write(f"error (rank {os.environ.get('RANK', 0)}): {error}\n")
        sys.stderr.flush()
        return 2
    finally:
        destroy()


def _named(error: BaseException, run: str | None = None) -> UserError | None:
    """The one-line UserError of a rank's ``error`` when it is a store that cannot be used (the store of the run
    folder ``run``: ``common.store_errors.store_error``) or a full disk or quota (``common.space.no_space`` of the
    file it names, else of ``run``); None for anything else."""
    from common.space import no_space, space_error
    from common.store import RUNS, store_of
    from common.store_errors import store_error

    found = store_error(error, store_of(run, RUNS) if run else None)
    if found is not None:
        return found
    full = space_error(error)
    where = full.filename if full is not None and full.filename is not None else run
    return no_space(os.fsdecode(where), full) if full is not None and where is not None else None


def name_process(name: str) -> None:
    """Linux: this process's name in ps/top (``comm``, 15 bytes): a forked rank would otherwise show its launcher's."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_name = 15
        ctypes.CDLL(None).prctl(pr_set_name, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def exit_rank(code: int) -> None:
    """End this rank with ``code`` once its work is done, skipping the interpreter's teardown (a rank was seen to
    abort there, SIGABRT, after finishing its work). A rank forked by ``training.launchers.torchrun`` ends
    through ``SystemExit``, which its launcher turns into a return value or a failure."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.environ.get(FORKED):
        sys.exit(code)
    os._exit(code)


def destroy() -> None:
    """Leave the process group (a no-op when none was joined)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def all_gather_cat(t: torch.Tensor) -> torch.Tensor:
    """Concatenate the same-shaped tensor of every rank, in rank order, on every rank."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return t
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts)


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum of ``t`` over all ranks (a new tensor)."""
    out = t.clone()
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(out)
    return out


