"""What a trial's run says (its validations, its value) and what the study says of its trials (the table, the
best-so-far curve, the compute pruning saved, the gain over trial 0)."""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial, TrialState

from training import RunDir, metrics as tm
from tuning.study import interrupted, is_baseline

RUN = "run"                  # user attributes of a trial: its run folder's URI,
CONFIG = "config"            # the dotted values of the space's fields in its config (trial 0's too),
STEPS = "steps"              # the steps it trained and
PLANNED_STEPS = "planned_steps"  # would have trained without pruning or early stopping,
BATCH = "batch_size"         # its global batch size,
DURATION = "duration_s"      # its wall time,
ERROR = "error"              # why it failed


def validations(run: RunDir) -> list[dict[str, Any]]:
    """The run's validation records so far (metrics.jsonl)."""
    return [r for r in run.metrics() if "eval_split" in r]


def value(run: RunDir, best_metric: str) -> float | None:
    """The trial's value: the validation AUC of the checkpoint the run keeps as best (by its ``best_metric``)."""
    best = tm.best_evaluation(run.metrics(), best_metric)
    return None if best is None else float(best["auc"])


def steps_trained(run: RunDir) -> int:
    """The steps the run trained: its last checkpoint's when complete, else the last metrics.jsonl records."""
    done = run.completion()
    if done and done.get("latest_step") is not None:
        return int(done["latest_step"])
    return max((r.get("step", 0) for r in run.metrics()), default=0)


def finished(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]


def best_trial(trials: list[FrozenTrial]) -> FrozenTrial | None:
    """The complete trial of the highest value (pruned trials never win: they did not train to their end)."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    return max(done, key=lambda t: (t.value, -t.number)) if done else None


def baseline(trials: list[FrozenTrial]) -> FrozenTrial | None:
    """The finished trial 0 (the base config), or None."""
    return next((t for t in trials if is_baseline(t) and t.state == TrialState.COMPLETE), None)


def table(trials: list[FrozenTrial], keys: list[str]) -> list[dict[str, Any]]:
    """One row per trial (queued ones aside): number, state, validation AUC, duration, steps, its values."""
    rows, again = [], interrupted(trials)
    for t in trials:
        if t.state == TrialState.WAITING:
            continue
        attrs = t.user_attrs
        state = "interrupted" if t.number in again else t.state.name.lower()
        row = {"trial": t.number, "state": ("base " if is_baseline(t) else "") + state,
               "val AUC": None if t.value is None else round(t.value, 6),
               "duration s": None if DURATION not in attrs else round(attrs[DURATION], 1),
               "steps": f"{attrs.get(STEPS, '')}/{attrs.get(PLANNED_STEPS, '')}"}
        values = attrs.get(CONFIG, {})
        row |= {key: _short(values.get(key, t.params.get(key, ""))) for key in keys}
        if attrs.get(ERROR):
            row["error"] = attrs[ERROR][:200]
        rows.append(row)
    return rows


def _short(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.4g}")
    if isinstance(v, list):
        return "-".join(str(x) for x in v)
    return v


def best_so_far(trials: list[FrozenTrial]) -> list[tuple[int, float, float]]:
    """(trial number, its value, the best value so far) of the complete trials, in order."""
    out, best = [], float("-inf")
    for t in sorted(trials, key=lambda t: t.number):
        if t.state == TrialState.COMPLETE and t.value is not None:
            best = max(best, t.value)
            out.append((t.number, t.value, best))
    return out


def savings(trials: list[FrozenTrial]) -> dict[str, Any]:
    """Training samples the pruned trials skipped: theirs and all trials', as counts and a share of what the study
    would have trained without pruning."""
    trained = planned = pruned_skipped = 0
    for t in finished(trials):
        batch, steps, plan = (t.user_attrs.get(k, 0) for k in (BATCH, STEPS, PLANNED_STEPS))
        trained += steps * batch
        if t.state == TrialState.PRUNED:
            pruned_skipped += max(plan - steps, 0) * batch
            planned += plan * batch
        else:
            planned += steps * batch   # a complete trial's early stop is not pruning's saving
    pruned = sum(t.state == TrialState.PRUNED for t in trials)
    return {"pruned_trials": pruned, "samples_trained": trained, "samples_saved_by_pruning": pruned_skipped,
            "share_saved": round(pruned_skipped / planned, 4) if planned else 0.0}
