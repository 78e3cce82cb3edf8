"""Per-rank entry point that torchrun starts: ``python -m training.worker RUN [--resume]``.

Reads ``<run>/config.yaml`` (written by the launcher before the ranks start), joins the
process group, builds the Trainer, resumes from the latest complete checkpoint if asked,
trains, and always leaves the process group.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from common.errors import UserError
from training import distributed
from training.checkpoint import Checkpointer
from training.config import TrainConfig
from training.rundir import RunDir


def die_with_parent() -> None:
    """Linux: get SIGKILLed when torchrun (our parent) dies. torchrun starts each rank in a session of
    its own, so a SIGKILL of torchrun or of its process group would otherwise leave the ranks training
    on as orphans, still writing checkpoints into the run folder that a ``--resume`` then uses."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    parser = argparse.ArgumentParser(prog="python -m training.worker", description=__doc__)
    parser.add_argument("run", help="run folder or URI holding config.yaml")
    parser.add_argument("--resume", action="store_true", help="continue from the latest complete checkpoint")
    args = parser.parse_args(argv)

    run = RunDir(args.run)
    try:
        cfg = TrainConfig.from_yaml(run.join("config.yaml"), **run.options)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = distributed.init(cfg.pg_timeout_s)
    try:
        from training.trainer import Trainer

        trainer = Trainer(cfg, env, run)
        if env.is_main:
            print(trainer.plan_text, flush=True)
            run.write_text(trainer.plan_text + "\n", "plan.txt")
        ckpt = Checkpointer(run, cfg.keep_checkpoints)
        if args.resume and ckpt.resolve("latest") is not None:
            step = trainer.load(ckpt, "latest")
            if env.is_main:
                print(f"resumed from step {step} (epoch {trainer.epoch}, step {trainer.step_in_epoch} of it)", flush=True)
        trainer.train()
        if env.is_main:
            best = ckpt.pointer("best")
            print(f"done: {trainer.step} steps; best {best}" if best else f"done: {trainer.step} steps", flush=True)
        return 0
    except UserError as e:
        print(f"error (rank {env.rank}): {e}", file=sys.stderr)
        return 2
    finally:
        distributed.destroy()


if __name__ == "__main__":
    sys.exit(main())
