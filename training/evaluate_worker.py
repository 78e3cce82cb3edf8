"""Per-rank entry point of an evaluation that torchrun starts:
``python -m training.evaluate_worker RUN [--config EVALUATE_CONFIG_JSON]`` (``training.evaluate`` launches it).

Every rank loads the checkpoint (DCP reshards it to this world size) and predicts its share of the
split; the predictions are gathered and rank 0 writes the report (``training.report``), with the metrics per
slice and the GAUC when asked (``training.evaluate_slices``).
"""

from __future__ import annotations

import argparse
import json

from training import distributed
from training.config import EvaluateConfig
from training.evaluate import check_inputs
from training.evaluate_slices import format_slices, gathered_rows, report
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
        sliced = _sliced(trainer, config, info["dataset"], probs, labels)
        record = write_report(run, config.split, probs, labels,
                              {"checkpoint": config.checkpoint, "step": info["step"], "dataset": info["dataset"],
                               "run": run.uri, "world_size": env.world_size, "warning": info["warning"],
                               "calibration_fit": _fit(trainer), **sliced})
        if sliced:
            print(format_slices(sliced), flush=True)
        print(f"{summary(record)} -> {run.eval_dir(config.split)}", flush=True)


def _fit(trainer) -> dict | None:
    """The calibration the predictions went through (``training.calibration``), or None: raw logits."""
    return None if trainer.calibration is None else trainer.calibration.to_dict()


def _sliced(trainer, config: EvaluateConfig, dataset: str, probs, labels) -> dict:
    """The slices and GAUC asked for (``training.evaluate_slices.report``) of the gathered predictions."""
    if not (config.slice_by or config.gauc_by):
        return {}
    data = trainer.dataset(config.split)
    order = gathered_rows(data.num_rows, trainer.eval_batch_size, trainer.env.world_size)
    if len(order) != len(probs):   # the gathering's order is training.data's batching: they must agree
        raise RuntimeError(f"{len(probs)} predictions gathered for {len(order)} rows of '{config.split}'")
    return report(probs, labels, dataset, data.spec, config.split, order, config.slice_by, config.slice_top,
                  config.gauc_by)


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
