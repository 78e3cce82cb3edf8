"""`dlrmflow tune`: the tune flow (an Optuna search over the training config; ephemeral Prefect: no server needed)."""

from __future__ import annotations

from flows.options import NPROC_ALIAS, add_options, build
from training import RanksConfig
from tuning.config import TuneConfig

DESCRIPTION = """\
Trial 0 trains the base config (--preset, default 'default', or --config YOURS.yaml) as is; the other trials
sample the search space (default: tuning/default-space.yaml; --space FILE: dotted config fields -> ranges or
choices) and are judged by the validation AUC of their best checkpoint. Each trial is a run in STORE/runs/,
trained by the launcher (--nproc, --launcher slurm ...). A hopeless trial is stopped at a validation (--pruner).
The study is kept in STORE/tunes/NAME/: the same command again resumes it, never re-running a finished trial.
At the end the base and best trials are evaluated on the test split, and the best config is written as a
training YAML (STORE/tunes/NAME/best.yaml; with --model NAME also STORE/models/NAME/tuned.yaml, which the
pipeline's --tuned-config model picks up).

examples:
  dlrmflow tune --dataset artifacts/datasets/criteo-1c7bb9f6a58e --trials 30 --parallel 2
  dlrmflow tune --dataset D --preset criteo-sample --space my-space.yaml --timeout 3600
  dlrmflow train --dataset D --run R --config artifacts/tunes/NAME/best.yaml
"""

EVERYDAY = ("--dataset", "--trials", "--parallel", "--space", "--timeout", "--preset", "--config", "--store",
            "--model", "--name", "--pruner", "--nproc", "--launcher")


def add_arguments(p) -> None:
    add_options(p, TuneConfig, root="tune", title="the search", aliases={"timeout_s": "--timeout"})
    add_options(p, RanksConfig, root="launch", title="where each trial's ranks run", aliases=NPROC_ALIAS)


def run(args) -> int:
    config = build(TuneConfig, args, root="tune")
    launch = build(RanksConfig, args, root="launch")
    # heavy: Prefect (the flow) and Optuna (the search), after the config is checked
    from flows.tune import tune
    from tuning.search import prepare

    prepare(config, launch.launcher).store.check()   # fail fast (and on a store that cannot be written), before Prefect

    summary = tune(config, launch.launcher)
    best, base = summary["best"], summary.get("base")
    print(f"\ndlrmflow tune finished: {summary['trials']} trials in {summary['tune']}")
    print(f"  best        trial {best['trial']}: validation AUC {best['val_auc']:.4f}"
          + (f" (trial 0, the base config: {base['val_auc']:.4f}, gain {summary['val_gain']:+.4f})" if base else ""))
    if "best_test" in summary:
        print(f"  {summary['test_split']:<11} AUC {summary['best_test']['auc']:.4f}"
              + (f" (base {summary['base_test']['auc']:.4f}, gain {summary['test_gain']:+.4f})"
                 if "base_test" in summary else ""))
    pruning = summary["pruning"]
    print(f"  pruned      {pruning['pruned_trials']} trials ({pruning['share_saved']:.0%} of their planned samples "
          "saved)")
    print(f"  config      {summary['best_config']}")
    if summary.get("model_tuned_config"):
        print(f"  model       {summary['model_tuned_config']}")
    return 0
