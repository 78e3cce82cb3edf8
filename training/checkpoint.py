"""Sharded checkpoints with torch.distributed.checkpoint (DCP) through fsspec.

``<run>/checkpoints/<step>/`` holds one DCP checkpoint; ``_COMPLETE`` is written in it after
every rank has finished writing, and only then the ``checkpoints/latest`` pointer (and
``checkpoints/best`` for a new best validation score). A checkpoint without ``_COMPLETE`` is
never used. ``_COMPLETE`` records the size and sha256 of every file of the checkpoint (the ranks
hash the files between them); every load checks them first (``Checkpointer.verify``) and names the
file that differs, so a damaged checkpoint is never trained, evaluated or exported from. DCP reshards on load: a checkpoint saved by N ranks loads on M ranks and under
another sharding plan. ``checkpoint_of`` finds a run's checkpoint by ``best`` (else latest), ``latest`` or step.

A full disk is one line on every rank (``common.space.NoSpace``: the checkpoint's path, the free space, the fix), which
the launcher's failure message shows: before a save, a local run folder with less free space than the newest
complete checkpoint took refuses it; a save that runs out of space (any rank's write, as DCP reports it) removes the
incomplete checkpoint and says so. A rank's full disk reaches DCP's report as a plain ``OSError`` (``_storage_writer``):
DCP pickles each rank's exception to gather them, and torch's zip writer raises a ``RuntimeError`` ("unexpected pos")
whose ``__context__``, the ENOSPC, pickling drops.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from contextlib import contextmanager, suppress
from typing import Any, Callable, Iterator

from common.errors import UserError
from common.space import NoSpace, check_free, space_error, writing
from training.rundir import RunDir

DIR, COMPLETE = RunDir.CHECKPOINTS, RunDir.COMPLETE   # the run folder names them (training.rundir)
NO_SPACE_FIX = ("free space on {mount} (`dlrmflow gc` removes what the store no longer needs; a smaller "
                "keep_checkpoints keeps fewer), or point --store elsewhere; then resume the run (--resume)")


class Checkpointer:
    """Saves, finds and loads the checkpoints of one run folder; keeps the newest ``keep`` (and the best)."""

    def __init__(self, run: RunDir, keep: int = 3):
        self.run, self.keep = run, keep

    # ---- finding ---------------------------------------------------------------------
    def steps(self) -> list[int]:
        """Steps of the complete checkpoints, ascending."""
        if not self.run.exists(DIR):
            return []
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.run.fs.ls(self.run.path(DIR), detail=False)]
        return sorted(int(n) for n in names if n.isdigit() and self.run.exists(DIR, n, COMPLETE))

    def pointer(self, name: str) -> dict[str, Any] | None:
        """Content of the ``latest`` or ``best`` pointer (``{"step": ..., ...}``), or None."""
        if not self.run.exists(DIR, name):
            return None
        return json.loads(self.run.read_text(DIR, name))

    def step_of(self, which: str | int = "latest") -> int | None:
        """Step of ``best``, ``latest`` or a step number, if that checkpoint is complete; else None
        (for ``latest``: the newest complete checkpoint, whatever the pointer says)."""
        complete = self.steps()
        if which == "latest":
            ptr = self.pointer("latest")
            if ptr and ptr["step"] in complete:
                return ptr["step"]
            return complete[-1] if complete else None
        if which == "best":
            ptr = self.pointer("best")
            return ptr["step"] if ptr and ptr["step"] in complete else None
        step = int(which)
        return step if step in complete else None

    def step_for(self, which: str | int, *, fallback: str | None = None) -> tuple[int, str | None]:
        """The step to load for ``which``, else (when given) for ``fallback``: ``(step, warning)``, the
        warning naming the checkpoint used when it fell back. Raises UserError when there is none."""
        step, warning = self.step_of(which), None
        if step is None and fallback is not None and (step := self.step_of(fallback)) is not None:
            warning = (f"the run has no complete '{which}' checkpoint; using '{fallback}' "
                       f"(step {step}) instead")
        if step is None:
            raise UserError(f"{self.run.join(DIR)}: no complete checkpoint '{which}' (complete steps: "
                            f"{self.steps() or 'none'}). Fix: train the run first, or choose best, latest "
                            "or one of those steps.")
        return step, warning

    def uri(self, step: int) -> str:
        return self.run.join(DIR, str(step))

    # ---- saving and loading ----------------------------------------------------------------
    def save(self, step: int, state: dict[str, Any], *, best: dict[str, Any] | None = None) -> None:
        """Save ``state`` (a dict of state dicts / Stateful objects) on all ranks, then mark it complete with
        its files' checksums.

        ``best``: metrics of a new best evaluation, recorded in the ``best`` pointer."""
        files = None
        # one answer for all: a rank's listing may be stale (s3fs caches); a refusal fails every rank alike
        write, refusal = _from_rank0(self._to_write(step) if _rank() == 0 else None)
        if refusal:
            raise NoSpace(*refusal)
        if write:
            import torch.distributed.checkpoint as dcp

            try:
                with writing(self.uri(step), NO_SPACE_FIX):
                    dcp.save(state, storage_writer=_storage_writer(self.uri(step), self.run.options))
            except NoSpace:
                if _rank() == 0:   # every rank is past its writes (DCP gathered their results): free the space
                    self._remove_incomplete(step)
                raise
            _barrier()
            files = _gather_dict(self._checksums(step, self._files(step)[_rank()::_world()]))
        if _rank() == 0:
            with writing(self.uri(step), NO_SPACE_FIX):
                if files is not None:
                    self.run.write_text(json.dumps({"step": step, "files": files}), DIR, str(step), COMPLETE)
                self.run.write_text(json.dumps({"step": step}), DIR, "latest")
                if best is not None:
                    self.run.write_text(json.dumps({"step": step, **best}), DIR, "best")
            self._prune()
        _barrier()

    def _to_write(self, step: int) -> tuple[bool, tuple[str, str] | None]:
        """Rank 0's answer for all: (whether checkpoint ``step`` is to be written, i.e. not complete yet; the
        ``NoSpace`` arguments when a local run folder has less free space than the newest complete checkpoint
        took, the estimate of what this one takes)."""
        steps = self.steps()
        if step in steps or not steps:
            return step not in steps, None
        need = self.size(steps[-1])
        try:
            check_free(self.uri(step), need, f"checkpoint {step}",
                       f"the size of checkpoint {steps[-1]}, the newest", NO_SPACE_FIX)
        except NoSpace as e:
            return True, (e.what, e.fix)
        return True, None

    def size(self, step: int) -> int:
        """The bytes of complete checkpoint ``step``'s files, as its ``_COMPLETE`` recorded them (0: not recorded)."""
        recorded = json.loads(self.run.read_text(DIR, str(step), COMPLETE)).get("files") or {}
        return sum(int(f.get("bytes", 0)) for f in recorded.values())

    def _remove_incomplete(self, step: int) -> None:
        """Remove the folder of checkpoint ``step``, which a failed save left without ``_COMPLETE`` (never used)."""
        with suppress(Exception):   # the save's own error is the one to report
            path = self.run.path(DIR, str(step))
            if not self.run.fs.exists(posixpath.join(path, COMPLETE)):
                self.run.fs.rm(path, recursive=True)

    def load(self, which: str | int, state: dict[str, Any]) -> int:
        """Load checkpoint ``best|latest|STEP`` into ``state`` in place (DCP reshards) once its files are
        verified; returns its step. Call on every rank of the group (they share the verification)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        step, _ = self.step_for(which)
        self.verify(step)
        dcp.load(state, storage_reader=FsspecReader(self.uri(step), **self.run.options), planner=_load_planner())
        return step

    def verify(self, step: int, *, shared: bool = True) -> None:
        """Check checkpoint ``step``'s files against the sizes and sha256 its ``_COMPLETE`` recorded; raises a
        UserError naming the first file that differs or is missing. ``shared``: every rank of the process group
        calls it and hashes its share (all raise the same error); else this process checks every file. A
        checkpoint written before checksums were recorded is taken as it is."""
        recorded = json.loads(self.run.read_text(DIR, str(step), COMPLETE)).get("files")
        if recorded is None:
            return
        names = sorted(recorded)
        mine = names[_rank()::_world()] if shared else names
        problems = []
        for name in mine:
            try:
                got = self._checksums(step, [name])[name]
            except FileNotFoundError:
                problems.append(f"{name} is missing")
                continue
            if got != recorded[name]:
                problems.append(f"{name} differs from what was saved ({got['bytes']:,} bytes, sha256 "
                                f"{got['sha256'][:12]}...; saved: {recorded[name]['bytes']:,} bytes, "
                                f"{recorded[name]['sha256'][:12]}...)")
        if shared:
            problems = sorted(p for part in _gather_list(problems) for p in part)
        if problems:
            others = [s for s in self.steps() if s != step]
            raise UserError(f"{self.uri(step)}: checkpoint file {problems[0]}"
                            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                            + ". The checkpoint is damaged and is not loaded. Fix: restore it from a backup, or use "
                            + (f"another checkpoint (complete steps: {others})" if others else "another run")
                            + ".")

    def _files(self, step: int) -> list[str]:
        """The names of the files DCP wrote for checkpoint ``step`` (its completion marker aside), sorted."""
        folder = self.run.path(DIR, str(step))
        self.run.fs.invalidate_cache(folder)   # written by every rank: a listing cached before would miss files
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.run.fs.ls(folder, detail=False)]
        self.run.fs.invalidate_cache(folder)   # nor may this one, without the marker rank 0 writes next, stay cached
        return sorted(n for n in names if n != COMPLETE)

    def _checksums(self, step: int, names: list[str]) -> dict[str, dict[str, Any]]:
        out = {}
        for name in names:
            digest, size = hashlib.sha256(), 0
            with self.run.fs.open(self.run.path(DIR, str(step), name), "rb") as f:
                while chunk := f.read(8 << 20):
                    digest.update(chunk)
                    size += len(chunk)
            out[name] = {"bytes": size, "sha256": digest.hexdigest()}
        return out

    def _prune(self) -> None:
        keep = set(self.steps()[-self.keep:])
        best = self.pointer("best")
        if best:
            keep.add(best["step"])
        for step in self.steps():
            if step not in keep:  # unmark first: a half-deleted folder is never taken for complete
                self.run.fs.rm(self.run.path(DIR, str(step), COMPLETE))
                self.run.fs.rm(self.run.path(DIR, str(step)), recursive=True)


def checkpoint_of(run: RunDir, checkpoint: str | int, dataset: str | None = None,
                  check: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``{"dataset", "step", "warning"}`` of checkpoint ``best|latest|STEP`` of a run (``best`` falls back
    to ``latest``, with the warning saying so); the dataset is ``dataset`` or the run's own, passed to
    ``check`` before the checkpoint is looked up. UserError for a folder that is no run or has no such checkpoint."""
    if not run.has_config():
        raise UserError(f"{run}: not a training run (no {RunDir.CONFIG} there). "
                        "Fix: set run_uri (--run) to the folder of a training run.")
    dataset = dataset or run.load_config().dataset
    if not dataset:
        raise UserError(f"{run.join(RunDir.CONFIG)} names no dataset. "
                        "Fix: set dataset (--dataset) to the dataset to evaluate on.")
    if check:
        check(dataset)
    fallback = "latest" if checkpoint == "best" else None
    step, warning = Checkpointer(run).step_for(checkpoint, fallback=fallback)
    return {"dataset": dataset, "step": step, "warning": warning}


def _storage_writer(uri: str, options: dict[str, Any]):
    """DCP's fsspec writer of checkpoint folder ``uri`` whose writes (a rank's files, rank 0's metadata) raise a full
    disk as a plain ``OSError`` of its errno (``_space_kept``), so that it survives DCP's pickled gather of the
    ranks' exceptions and ``common.space.writing`` finds it on every rank."""
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    class Writer(FsspecWriter):
        def write_data(self, plan, planner):
            with _space_kept():   # the files are written here, before the future returns (thread_count threads)
                return super().write_data(plan, planner)

        def finish(self, metadata, results):
            with _space_kept():
                return super().finish(metadata, results)

    return Writer(uri, **options)


@contextmanager
def _space_kept() -> Iterator[None]:
    """A full disk raised in the block (``common.space.space_error``: also a ``__context__``, as torch's zip writer
    leaves the ENOSPC under its "unexpected pos" ``RuntimeError``) raised again as a plain, picklable ``OSError``."""
    try:
        yield
    except Exception as e:
        found = space_error(e)
        if found is None or found is e:
            raise
        raise OSError(found.errno, found.strerror or os.strerror(found.errno),
                      *([found.filename] if found.filename is not None else [])) from e


def _load_planner():
    """DCP's default load planner without its guess at pre-2.4 checkpoints.

    TorchRec's fused optimizer keeps the state of a table-wise table only on the rank that owns
    it, so a rank's state dict lacks keys that the checkpoint holds. The default planner takes
    such keys for a sign of an old checkpoint format and re-flattens the state dict the old way,
    which then fails ("Missing key in checkpoint state_dict: progress"). Every checkpoint here is
    written in the current format: each rank simply reads the keys it has. (Built here: torch's
    checkpoint modules take seconds to import, and finding a checkpoint needs none of them.)"""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, create_default_local_load_plan

    class LoadPlanner(DefaultLoadPlanner):
        def create_local_plan(self):
            return create_default_local_load_plan(self.state_dict, self.metadata, not self.allow_partial_load)

    return LoadPlanner()


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1


def _gather_list(item: Any) -> list[Any]:
    """Every rank's ``item``, in rank order, on every rank (``[item]`` without a process group)."""
    import torch.distributed as dist

    if _world() == 1:
        return [item]
    out: list[Any] = [None] * _world()
    dist.all_gather_object(out, item)
    return out


def _from_rank0(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (``value`` without a process group)."""
    import torch.distributed as dist

    if _world() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _gather_dict(part: dict[str, Any]) -> dict[str, Any]:
    return {k: v for d in _gather_list(part) for k, v in d.items()}


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
