"""What a night tells: Prefect events for automations, and the pipeline's failure hook that notifies.

Events (``prefect.events.emit_event``), each about the model (resource ``dlrmflow.model.<name>``; a run without a
model: ``dlrmflow.pipeline``): ``dlrmflow.night.completed`` (date, run, metrics and the decision's numbers),
``dlrmflow.night.failed`` (date, stage, error), ``dlrmflow.model.promoted`` (the decision's numbers) and
``dlrmflow.data.check_failed`` (date, on_data_check, the test day's failed checks) and ``dlrmflow.data.day_quarantined``
(day, why, the night's date), both emitted by the data gate (``flows.datacheck``), and ``dlrmflow.model.degraded``
(date, the champion, why, its watch: ``models.watch``), emitted by ``degraded`` after a night where the champion fell
out of its own band while no challenger won, which also notifies ``night.notify_block``. ``dlrmflow.day.landed``
(day, its files) is the day-landed sensor's (``flows.landed``): the served pipeline's trigger starts that day's night.

``pipeline_failed`` is the pipeline's ``on_failure`` and ``on_crashed`` hook: it records a dated night of a model in the
model's history (a ``failed`` line naming the stage and the error, ``models.registry.record_failed``; the data gate
records its own), emits ``dlrmflow.night.failed`` and sends the message to the notification block ``night.notify_block``
of the run's config. A hook that fails logs why and never changes the run's own state. The pipeline says which stage
it is in through ``stage``.
"""

from __future__ import annotations

import json
from typing import Any

from common.errors import bounded
from common.store import Store, default_store
from common.store_errors import store_error
from models import PROMOTING, registry, watch
from nightly.config import grouped

HISTORY_LOCK_S = 60.0   # how long the failure hook waits for the model's promotion lock to record the failed night

NIGHT_COMPLETED = "dlrmflow.night.completed"
NIGHT_FAILED = "dlrmflow.night.failed"
MODEL_PROMOTED = "dlrmflow.model.promoted"
DATA_CHECK_FAILED = "dlrmflow.data.check_failed"   # by the data gate (flows.datacheck): the test day failed
DAY_QUARANTINED = "dlrmflow.data.day_quarantined"   # by the data gate: a day judged now was quarantined
MODEL_DEGRADED = "dlrmflow.model.degraded"   # the champion fell out of its band (models.watch), no challenger won
DAY_LANDED = "dlrmflow.day.landed"   # by the day-landed sensor (flows.landed): a day of the inputs is complete

_RUNS: dict[str, dict[str, str]] = {}   # flow run id -> {"stage", "date"}, read by the hook of that run


def flow_run_owner() -> str | None:
    """Who writes in a model's records from this flow run: ``flow run NAME (ID)``; None outside a flow run."""
    from prefect.context import FlowRunContext

    fr = FlowRunContext.get()
    return f"flow run {fr.flow_run.name} ({fr.flow_run.id})" if fr and fr.flow_run else None


def resource(model: str | None) -> dict[str, str]:
    """The events' resource: the model, or the pipeline when the run has none."""
    if model:
        return {"prefect.resource.id": f"dlrmflow.model.{model}", "prefect.resource.name": model}
    return {"prefect.resource.id": "dlrmflow.pipeline", "prefect.resource.name": "pipeline"}


def emit(event: str, model: str | None, payload: dict[str, Any]) -> None:
    """Emit ``event`` about ``model`` with ``payload`` (``bounded_payload``: never too large to emit)."""
    from prefect.events import emit_event

    emit_event(event, resource=resource(model), payload=bounded_payload(payload))


PAYLOAD_ITEMS = 100          # of a list in an event's payload
PAYLOAD_BYTES = 256 << 10    # of an event's payload as JSON (Prefect refuses an event over 1.5 MB: EventTooLarge)


def bounded_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with each string cut to ``common.errors.MESSAGE_CHARS`` and each list to ``PAYLOAD_ITEMS`` (an
    error may quote a file's bytes; a day's failed checks may be many); where it is still over ``PAYLOAD_BYTES``,
    each list and mapping as its JSON text, cut."""
    def cut(value: Any) -> Any:
        if isinstance(value, str):
            return bounded(value)
        if isinstance(value, dict):
            return {str(k)[:200]: cut(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            more = [f"... ({len(value) - PAYLOAD_ITEMS} more)"] if len(value) > PAYLOAD_ITEMS else []
            return [cut(v) for v in value[:PAYLOAD_ITEMS]] + more
        return value

    out = cut(payload)
    if len(json.dumps(out, default=str)) > PAYLOAD_BYTES:
        out = {k: bounded(json.dumps(v, default=str)) if isinstance(v, (dict, list)) else v for k, v in out.items()}
    return out


def stage(name: str, date: str | None = None) -> None:
    """Record that this flow run is now in stage ``name`` (and, once known, for which date)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    night = _RUNS.setdefault(str(ctx.flow_run.id), {})
    night["stage"] = name
    if date:
        night["date"] = date


def completed(model: str | None, result: dict) -> None:
    """A run finished: for a dated one (a night), emit ``dlrmflow.night.completed`` (and ``dlrmflow.model.promoted``
    after a promotion)."""
    from prefect.context import FlowRunContext

    if (ctx := FlowRunContext.get()) and ctx.flow_run:
        _RUNS.pop(str(ctx.flow_run.id), None)
    if not result.get("date"):
        return
    decision = result.get("decision")
    numbers = {k: decision.get(k) for k in ("decision", "reason", "refused", "challenger", "champion", "champion_run",
                                            "promote_margin")} if decision else {}
    metrics = {k: result.get("metrics", {}).get(k) for k in ("auc", "logloss", "rows", "step")}
    emit(NIGHT_COMPLETED, model, {"date": result.get("date"), "run": result.get("run"), "metrics": metrics,
                                  "skipped": result.get("skipped"),
                                  "left_out": (result.get("data_checks") or {}).get("left_out") or {}, **numbers})
    if decision and decision.get("decision") in PROMOTING:
        emit(MODEL_PROMOTED, model, {"date": result.get("date"), "run": result.get("run"), **numbers})


def message(date: str, model: str | None, stage_name: str, error: str, flow_run_name: str) -> tuple[str, str]:
    """(subject, body) of a failed night's notification."""
    what = f"model {model}" if model else "the pipeline"
    subject = f"dlrmflow: the night {date} of {what} failed at {stage_name}"
    return subject, f"{subject}: {error} (flow run {flow_run_name})"


def error_of(text: str | None, fallback: str) -> str:
    """A failed run's error in one line, for its history line, event and notification: the message's first line,
    and the failing rank's own error line when the message holds one below it (a rank job's failure says which rank
    failed how, then the rank's last lines, among them ``error (rank N): ...``: the cause, e.g. the damaged
    checkpoint file)."""
    lines = (text or "").strip().splitlines()
    if not lines:
        return fallback
    cause = next((line.strip() for line in lines[1:] if line.startswith("error (rank")), None)
    return bounded(f"{lines[0]} {cause}" if cause else lines[0])   # what the history, the event and the note keep


def pipeline_failed(flow, flow_run, state) -> None:
    """The pipeline's on_failure/on_crashed hook, for a dated night or a plain run: record a failed night in the
    model's history, emit ``dlrmflow.night.failed`` (a plain run's too: the event keeps its name) and notify
    ``notify_block``."""
    from prefect.logging.loggers import flow_run_logger

    log = flow_run_logger(flow_run, flow)
    night = _RUNS.pop(str(flow_run.id), {})
    config = (flow_run.parameters or {}).get("config") or {}
    if not isinstance(config, dict):   # the in-process call's parameters may hold the model itself
        config = config.model_dump(mode="json")
    config = grouped(config, strict=False)   # a deployment's parameters from before the groups; a hook never fails
    model = config.get("model")
    date = night.get("date") or str((flow_run.parameters or {}).get("date") or "(undated)")
    stage_name = night.get("stage", "setup")
    error = error_of(state.message, f"the run ended {state.type.value.lower()}")
    if model and night.get("date") and stage_name != "data check":   # the data gate recorded its own line
        try:
            uri = registry.model_uri(Store(config.get("store")).uri, model)
            if registry.record_failed(uri, date, stage_name, error, owner=f"flow run {flow_run.name} (failed)",
                                      timeout_s=HISTORY_LOCK_S):
                log.info("model %s: the night %s recorded as failed at %s in %s", model, date, stage_name, uri)
        except Exception as e:  # noqa: BLE001 - the run's own failure is what counts
            # a store that cannot be used says its one line (botocore's words did in the month's S3 night)
            said = store_error(e, config.get("store") or default_store()) or f"{type(e).__name__}: {e}"
            log.warning("could not record the failed night %s in model %s's history: %s", date, model, said)
    try:
        emit(NIGHT_FAILED, model, {"date": date, "stage": stage_name, "error": error, "state": state.type.value,
                                   "flow_run": str(flow_run.id)})
    except Exception as e:  # noqa: BLE001 - the run's own failure is what counts
        log.warning("could not emit %s: %s: %s", NIGHT_FAILED, type(e).__name__, e)
    block = (config.get("night") or {}).get("notify_block")
    if not block:
        return
    notify(block, *message(date, model, stage_name, error, flow_run.name), log, "the failed night")


def notify(block: str, subject: str, body: str, log, what: str) -> None:
    """Send ``body`` under ``subject`` to the Prefect notification block ``block``; a failure is logged (naming
    ``what`` was to be told), never raised."""
    try:
        import prefect.blocks.notifications  # noqa: F401 - registers the built-in notification block types
        from prefect.blocks.core import Block

        Block.load(block).notify(body, subject)
        log.info("notified %s: %s", block, subject)
    except Exception as e:  # noqa: BLE001 - a failed notification must not mask the run's state
        log.error("could not notify %s of %s: %s: %s", block, what, type(e).__name__, e)


def degraded(model: str | None, entry: dict, block: str | None, log) -> list[str]:
    """After a night (its history line ``entry``): when its champion degraded while no challenger won
    (``models.watch.degraded``), log it, emit ``dlrmflow.model.degraded`` and notify ``block``. Returns why."""
    why = watch.degraded(entry)
    if not why:
        return why
    champion = entry.get("champion_run")
    subject = f"dlrmflow: the champion of model {model} degraded on {entry.get('date')}"
    body = f"{subject}: {'; '.join(why)} (champion {champion}; {entry.get('decision')}: {entry.get('reason')})"
    log.warning(body)
    try:
        emit(MODEL_DEGRADED, model, {"date": entry.get("date"), "champion_run": champion, "why": why,
                                     "watch": entry.get("watch"), "decision": entry.get("decision")})
    except Exception as e:  # noqa: BLE001 - the night's decision is recorded; the event is its echo
        log.warning("could not emit %s: %s: %s", MODEL_DEGRADED, type(e).__name__, e)
    if block:
        notify(block, subject, body, log, "the degraded champion")
    return why
