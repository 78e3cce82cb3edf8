"""Per-rank entry point that torchrun starts: ``python -m training.train_worker RUN [--resume]``.

Reads the run's config (saved by the launcher before the ranks start), joins the process group,
builds the Trainer, resumes from the latest complete checkpoint if asked, trains, marks the run
complete (rank 0), and always leaves the process group.
"""

from __future__ import annotations

import argparse

from common.process import die_with_parent
from training import distributed
from training.checkpoint import Checkpointer
from training.rundir import RunDir


def train(run: RunDir, resume: bool) -> None:
    """Train the run on this rank (resuming from its latest complete checkpoint if asked); rank 0
    writes the sharding plan and, at the end, the completion marker."""
    cfg = run.load_config()
    env = distributed.init(cfg.pg_timeout_s)
    from training.trainer import Trainer

    trainer = Trainer(cfg, env, run)
    if env.is_main:   # the launcher saved the config resolved (training.config.TrainConfig.resolved)
        print(f"validation: {validation(trainer)}", flush=True)
        run.write_text(trainer.plan_text + "\n", RunDir.PLAN)  # before the print: the train flow reads it then
        print(trainer.plan_text, flush=True)
        run.mark_incomplete()
    ckpt = Checkpointer(run, cfg.keep_checkpoints)
    if resume and ckpt.step_of("latest") is not None:
        step = trainer.load(ckpt, "latest")
        if env.is_main:
            print(f"resumed from step {step} (epoch {trainer.epoch}, step {trainer.step_in_epoch} of it)", flush=True)
    trainer.train()
    if env.is_main:
        best = ckpt.pointer("best")
        print(f"done: {trainer.step:,} steps" + (f"; best {best_text(best)}" if best else ""), flush=True)
        print(f"validated on: {validation(trainer)}", flush=True)
        run.mark_complete({"latest_step": ckpt.step_of("latest"), "world_size": env.world_size})


def best_text(best: dict) -> str:
    """The best pointer as a person reads it: ``step 93: auc 0.7506, logloss 0.4848 on 6,000 rows (chosen by auc)``."""
    shown = [f"{k} {v:.4f}" for k, v in best.items() if k not in ("step", "rows") and isinstance(v, float)]
    rows = f" on {best['rows']:,} rows" if isinstance(best.get("rows"), int) else ""
    return f"step {best.get('step')}: {', '.join(shown)}{rows} (chosen by {best.get('metric')})"


def validation(trainer) -> str:
    """What the run validates on (the best checkpoint and early stopping), with the rows it reads."""
    from training.config import HOLDOUT

    split = trainer.eval_split
    if split == HOLDOUT:
        held, rest = trainer.dataset(HOLDOUT), trainer.train_data
        return (f"holdout: the last {held.num_rows:,} rows of split '{rest.split}' (rows {held.start:,}.."
                f"{held.start + held.num_rows - 1:,}, data.holdout_fraction {trainer.cfg.data.holdout_fraction:g}), "
                f"set aside: training on its first {rest.num_rows:,}; never the test split")
    if split is None:
        return "none (eval_split null): the last checkpoint is kept, none is chosen"
    return f"split '{split}' ({trainer.dataset(split).num_rows:,} rows)"


def main(argv: list[str] | None = None) -> int:
    # torchrun starts each rank in a session of its own: a SIGKILL of torchrun or of its process group would
    # otherwise leave the ranks training on as orphans, still writing checkpoints that a --resume then uses
    die_with_parent()
    parser = argparse.ArgumentParser(prog="python -m training.train_worker", description=__doc__)
    parser.add_argument("run", help="run folder or URI holding the config")
    parser.add_argument("--resume", action="store_true", help="continue from the latest complete checkpoint")
    args = parser.parse_args(argv)
    return distributed.run_rank(lambda: train(RunDir(args.run), args.resume), args.run)


if __name__ == "__main__":
    distributed.exit_rank(main())
