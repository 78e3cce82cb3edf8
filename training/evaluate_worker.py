"""Per-rank entry point of an evaluation that torchrun starts:
``python -m training.evaluate_worker RUN [--config EVALUATE_CONFIG_JSON]`` (``training.evaluate`` launches it).

Every rank loads the checkpoint (DCP reshards it to this world size) and predicts its share of the
split; the predictions are gathered and rank 0 writes the report (``training.report``).
"""

from __future__ import annotations

import argparse
import json

from training import distributed
from training.config import EvaluateConfig
from training.evaluate import check_inputs
from training.report import summary, write_report
from training.rundir import RunDir


def evaluate(run: RunDir, config: EvaluateConfig) -> None:
    """Predict this rank's share of the split; rank 0 writes the report of all the predictions."""
    info = check_inputs(run, config)
    from training.trainer import Trainer

    trainer = Trainer.from_run(run, info["step"], overrides={"dataset": info["dataset"]})
    probs, labels = trainer.predict(config.split)
    env = trainer.env
    if env.is_main:
        record = write_report(run, config.split, probs, labels,
                              {"checkpoint": config.checkpoint, "step": info["step"], "dataset": info["dataset"],
                               "run": run.uri, "world_size": env.world_size, "warning": info["warning"]})
        print(f"{summary(record)} -> {run.eval_dir(config.split)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.evaluate_worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="run folder or URI (holds config.yaml and checkpoints/)")
    parser.add_argument("--config", default="{}", help="the EvaluateConfig as JSON (default: its defaults)")
    args = parser.parse_args(argv)
    return distributed.run_rank(
        lambda: evaluate(RunDir(args.run), EvaluateConfig.from_dict(json.loads(args.config), source="--config")),
        args.run)


if __name__ == "__main__":
    distributed.exit_rank(main())   # the process group is destroyed and every file written by now
