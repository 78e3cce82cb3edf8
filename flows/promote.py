"""After a dated run: the new model (challenger) against the named model's champion on the test day's raw rows,
each with its own vocabulary; the better one is the champion (``nightly.registry`` records it under a lock). Then
the store is cleaned (``flows.gc``)."""

from __future__ import annotations

import math
import os
import posixpath
import tempfile

from prefect import get_run_logger, task
from prefect.cache_policies import NONE
from prefect.context import FlowRunContext

from common.store import Store
from flows import artifacts
from flows.config import PipelineConfig
from flows.errors import user_errors
from nightly import registry, scoring
from nightly.config import ScoreConfig
from nightly.decision import RowScores, paired
from nightly.window import Window
from training.rundir import RunDir

METRICS = ("auc", "logloss", "rows", "positives", "base_logloss", "calibration")   # what the gates read of each model


@task(cache_policy=NONE)
@user_errors
def compete(config: PipelineConfig, store: Store, days: Window, run: RunDir, dataset: str,
            metrics: dict, data_checks: dict | None = None) -> dict:
    """The new model against the champion of ``config.model`` on the test day: scored, decided and recorded
    (promoted or kept: ``nightly.registry.record``'s ordered commit, the bundle first) under the model's lock,
    with the night's data checks (``data_checks``: a failed one keeps the champion); a re-run of a decided night
    scores nothing and repairs. Returns the history entry, also shown as artifacts."""
    log = get_run_logger()
    owner = f"flow run {fr.flow_run.name} ({fr.flow_run.id})" if (fr := FlowRunContext.get()) and fr.flow_run else None
    model = registry.model_uri(store.uri, config.model)
    candidate = {"run": run.uri, "step": metrics["step"], "dataset": dataset,
                 "vocab": posixpath.join(dataset, "vocab"), "date": days.date.isoformat(),
                 "window": [d.isoformat() for d in days.days]}
    done = registry.decided(model, days.date.isoformat(), run.uri)
    if done is not None:   # a re-run of a night already decided: nothing to score again; record() repairs
        log.info("model %s on %s: already decided (%s)", config.model, days.date, done["decision"])
        mine = {k: math.nan if v is None else v for k, v in done["challenger"].items()}
        entry = registry.record(model, {**candidate, "metrics": mine}, say=log.info, owner=owner,
                                export=_export_verified)
        return entry
    gates = config.gates
    champion = registry.load_champion(model)
    compared = (champion is not None and champion.run != run.uri
                and registry.ineligible(champion, days.date.isoformat()) is None)
    with tempfile.TemporaryDirectory(prefix="dlrmflow-compete-") as scratch:   # scores only feed the comparison
        scored = {}

        def score(side: str, **which) -> tuple[dict, RowScores]:
            """The test day scored by ``which`` (once per side): its metrics and its per-row scores."""
            if side not in scored:
                out = os.path.join(scratch, f"{side}.parquet")
                summary = scoring.score(ScoreConfig(**which, inputs=days.test_inputs(), out=out, progress=False),
                                        launcher=config.launcher, on_line=log.info)
                rows = scoring.row_scores(out)   # only a complete output (its marker checked)
                scored[side] = {k: summary.get(k) for k in METRICS} | {"fingerprint": rows.fingerprint}, rows
            return scored[side]

        def challenger():
            return score("challenger", run=run.uri, checkpoint=metrics["step"])

        def measure(current: registry.Champion) -> dict:
            """The champion on the same rows as the challenger, with the paired comparison of the two."""
            log.info("scoring the champion (%s, step %d) on %s with its own vocabulary", current.run, current.step,
                     days.date)
            theirs, their_rows = score(f"champion-{registry.bundle_name(current.run)}", model=model)
            return theirs | {"paired": paired(challenger()[1], their_rows, gates.confidence)}

        if compared or config.evaluate.split != "test" or config.evaluate.dataset:
            mine = challenger()[0]   # a comparison needs both models' scores of the same rows
        else:
            mine = {k: metrics.get(k) for k in METRICS}   # evaluation scored exactly the test day, this vocabulary
        entry = registry.record(model, {**candidate, "metrics": mine}, measure(champion) if compared else None,
                                champion.run if champion else None, gates=gates, score_champion=measure,
                                say=log.info, owner=owner, export=_export_verified, data_checks=data_checks)
    log.info("model %s on %s: %s (%s)", config.model, days.date, entry["decision"], entry["reason"])
    if entry["decision"] in registry.PROMOTING:
        log.info("serving bundle of the new champion: %s",
                 posixpath.join(model, registry.BUNDLES, registry.bundle_name(run.uri)))
    artifacts.model_history(model, config.model, entry)
    if data_checks is not None:
        artifacts.data_drift(model, config.model)
    return entry


def _export_verified(*args, **kwargs):
    """training.export.export_verified, imported when a champion is exported (it imports torch: seconds that
    a night which promotes nothing, and every `dlrmflow` start, need not spend)."""
    from training.export import export_verified

    return export_verified(*args, **kwargs)
