"""Evaluate a checkpoint of a run on a held-out split, from the launcher's side.

``evaluate_run(run, EvaluateConfig(...))`` checks the inputs (``check_inputs``), runs
``training.evaluate_worker`` on ``nproc`` ranks under torchrun and returns the metrics that rank 0 wrote
to ``<run>/eval/<split>/metrics.json`` (``training.report``). What ``dlrmflow evaluate`` and the
Prefect flow call.
"""

from __future__ import annotations

from typing import Any, Callable

from common.errors import UserError
from training.config import EvaluateConfig
from training.rundir import RunDir


def check_inputs(run: RunDir, config: EvaluateConfig) -> dict[str, Any]:
    """Fail early, with a clear message, on an unknown run, a split the dataset lacks or a missing
    checkpoint. Returns ``{"dataset", "step", "warning"}``: the dataset and the checkpoint step to
    use, and a warning when ``best`` fell back to ``latest`` (a run that never validated), else None."""
    from feature_spec import load
    from training.checkpoint import checkpoint_of

    return checkpoint_of(run, config.checkpoint, config.dataset, check=lambda dataset: config.check_split(
        load(dataset).splits, dataset))


def evaluate_run(run: RunDir | str, config: EvaluateConfig, *, env: dict[str, str] | None = None,
                 on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Evaluate checkpoint ``config.checkpoint`` of a run on ``config.split`` with ``config.nproc`` ranks
    (torchrun, in a subprocess). Returns the content of ``<run>/eval/<split>/metrics.json``; raises
    UserError on bad inputs or a failed evaluation. Output goes to this process's stdout or to ``on_line``."""
    from training.launchers.local import run_command, torchrun_command

    run = RunDir(run)
    lines: list[str] = []

    def keep(line: str) -> None:
        lines.append(line)
        if on_line:
            on_line(line)
        else:
            print(line, flush=True)

    if warning := check_inputs(run, config)["warning"]:
        keep(f"warning: {warning}")
    cmd = torchrun_command(run.uri, nproc=config.nproc, module="training.evaluate_worker",
                           args=["--config", config.model_dump_json()])
    with run.lease("evaluation", say=keep):   # never while a training or another evaluation writes the run
        rc = run_command(cmd, env=env, on_line=keep)
    if rc != 0:
        errors = [ln for ln in lines if ln.startswith("error")] or lines[-20:]
        raise UserError(f"evaluation of {run} on '{config.split}' failed (torchrun exit code {rc}):\n"
                        + "\n".join(errors))
    return run.eval_metrics(config.split)
