"""Nights that start when the day lands: the day-landed sensor (the ``day-landed`` flow, served by `dlrmflow serve` on a
short interval), the served pipeline's trigger on its event, and the pipeline's refusal of a second night for a day.

Each look of the sensor (``nightly.landing.scan``: the rule, the days, what it remembers in the model's landed.jsonl)
emits one ``dlrmflow.day.landed`` event per day that landed, about the model, with the day and its files' identities;
the pipeline deployment's ``DeploymentEventTrigger`` (``trigger``) runs the pipeline with ``date`` set to that day. A
night that the trigger (any automation) or the schedule started runs once a day (``refused``): a duplicate event, a
re-upload, a restarted sensor or the cron fallback after the night ran each start a flow run that says so and ends."""

from __future__ import annotations

import datetime as dt

from prefect import flow, get_run_logger
from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger

from common.store import Store
from flows import events
from flows.errors import user_errors
from models import registry
from nightly.landing import LANDED, once, rule_text, scan
from nightly.config import LandingConfig, PipelineConfig
from nightly.window import absolute


@flow(name="day-landed")
@user_errors
def day_landed(store: str, model: str, inputs: list[str], landing: LandingConfig = LandingConfig()) -> list[str]:
    """Look once for days of the dated inputs that landed (complete by the rule) and tell of each once (the event
    dlrmflow.day.landed, which starts the model's night for that day); returns the days told of.

    Args:
        store: The served store (the model's landed.jsonl remembers the days told of).
        model: The model whose nights the days start.
        inputs: The pipeline's dated input templates ({date}).
        landing: When a day is complete, and how many of the newest days to look at.
    """
    log = get_run_logger()
    model_uri = registry.model_uri(Store(store).uri, model)
    found = scan(list(absolute(inputs)), landing, model_uri)
    for note in found.notes:
        log.info(note)
    at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    for day in found.landed:   # told first, then remembered: a look cut short tells again, the night runs once
        events.emit(events.DAY_LANDED, model, {"day": day.day.isoformat(), "files": day.files,
                                               "rule": rule_text(landing)})
        registry.record_landed(model_uri, [day.line(LANDED, at)])
    registry.record_landed(model_uri, found.lines)
    return [d.day.isoformat() for d in found.landed]


def trigger(model: str, deployment: str) -> DeploymentEventTrigger:
    """The trigger of the pipeline deployment ``deployment``: a run for the day of each ``dlrmflow.day.landed`` about
    ``model``."""
    return DeploymentEventTrigger(
        name=f"{deployment}: the day landed", expect={events.DAY_LANDED},
        match={"prefect.resource.id": events.resource(model)["prefect.resource.id"]},
        parameters={"date": "{{ event.payload.day }}"},
        description=f"Run the night of model {model} for each day the day-landed sensor saw complete.")


def started_by_automation() -> bool:
    """Whether this flow run was created by an automation (the day-landed trigger is one)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    by = ctx.flow_run.created_by if ctx and ctx.flow_run else None
    return by is not None and by.type == "AUTOMATION"


def refused(config: PipelineConfig, store: Store, day: dt.date, date: dt.date | None) -> str | None:
    """Why this pipeline run of the night ``day`` ends at once (None: it runs): started by the schedule (no ``date``)
    or by the day-landed trigger, for a night of a model that already ran (``nightly.landing.once``). A person's Run
    with the date set re-runs the night."""
    if not config.model or (date is not None and not started_by_automation()):
        return None
    return once(registry.model_uri(store.uri, config.model), day)
