"""The store's clean-up as a task of the pipeline: after a dated night's decision, ``models.gc.collect`` removes
what no champion, recent night, lease or window needs (the rule that once only pruned parsed parts), logs the
table of what went and publishes it as an artifact. `dlrmflow gc` runs the same without Prefect."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NONE
from prefect.context import FlowRunContext

from common.errors import UserError
from flows import artifacts
from nightly.config import PipelineConfig
from models import gc as cleanup
from nightly.window import Window


@task(name="gc", cache_policy=NONE)
def gc(config: PipelineConfig, store: str, days: Window) -> dict:
    """Clean the store after the night ``days`` of ``config`` (its model's next window is kept; every other
    model's from its history). A store that cannot be cleaned safely (an unreadable history) keeps everything,
    with a warning: a night never fails for its clean-up. Returns the summary (items, bytes, dry run)."""
    log = get_run_logger()
    fr = FlowRunContext.get()
    owner = f"gc after flow run {fr.flow_run.name}" if fr and fr.flow_run else None
    night = cleanup.Night(config.model, days.next_start())   # reaching back past a quarantined day, as tonight
    try:
        report = cleanup.collect(config.gc_config(store, list(days.templates)), night,
                                 work_dir=config.preprocess.work_dir, owner=owner, say=log.info)
    except UserError as e:
        log.warning("gc removed nothing: %s", e)
        return {"removed": 0, "bytes": 0, "dry_run": config.gc.dry_run, "error": str(e)}
    for line in report.table().splitlines():
        log.info("%s", line)
    artifacts.gc_table(report)
    return {"removed": len(report.removals), "bytes": report.bytes, "dry_run": report.dry_run}
