"""Someone is told (issue 19, section 8) on the session's Prefect test harness: a failed night notifies a real
webhook notification block (a local HTTP server), emits ``dlrmflow.night.failed`` and records a ``failed`` line in
the model's history; a night that ``catchup: latest`` skips records itself and emits ``dlrmflow.night.completed``; a
promotion emits ``dlrmflow.model.promoted``.
The events are read back from the harness's API (``/events/filter``)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from flows import events
from flows.pipeline import pipeline
from helpers.prefect_api import logs_matching, small_pipeline
from helpers.processes import free_port
from models import registry

DAY = "2026-11-05"


@contextmanager
def webhook():
    """A local HTTP server that keeps the JSON bodies POSTed to it: (url, bodies)."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", bodies
    finally:
        server.shutdown()
        server.server_close()


def _webhook_block(name: str, url: str) -> str:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    CustomWebhookNotificationBlock(name="dlrmflow", url=url,
                                   json_data={"subject": "{{subject}}", "text": "{{body}}"}).save(name, overwrite=True)
    return f"custom-webhook/{name}"


def _events(name: str, model: str, timeout_s: float = 30) -> list:
    """The events ``name`` about ``model`` the harness's API has stored (waits for at least one)."""
    from prefect import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    flt = EventFilter(event=EventNameFilter(name=[name]),
                      resource=EventResourceFilter(id=[events.resource(model)["prefect.resource.id"]]))
    deadline = time.monotonic() + timeout_s
    while True:
        with get_client(sync_client=True) as client:
            found = client.read_events(filter=flt, limit=50).events
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _failing_night(tmp_path, model: str, block: str):
    """A dated night of ``model`` whose test day is missing: it fails in setup, before any work."""
    template = str(tmp_path / "logs" / "{date}" / "part-*")
    return small_pipeline(str(tmp_path / "store"), preprocess={"inputs": [template]}, window={"train_days": 2},
                          model=model, notify_block=block)


def test_a_failed_night_notifies_the_webhook_block_and_emits_an_event(prefect_harness, tmp_path):
    with webhook() as (url, bodies):
        config = _failing_night(tmp_path, "told", _webhook_block("dlrmflow-test-hook", url))
        state = pipeline(config, date=dt.date.fromisoformat(DAY), return_state=True)
    assert state.is_failed()
    error = state.message.splitlines()[0]
    [body] = bodies
    assert body["subject"] == f"dlrmflow: the night {DAY} of model told failed at setup"
    assert body["text"].startswith(f"{body['subject']}: {error} (flow run ")
    assert DAY in error   # the missing day is named
    [event] = _events(events.NIGHT_FAILED, "told")
    assert event.payload["date"] == DAY and event.payload["stage"] == "setup" and event.payload["error"] == error
    assert event.resource.id == "dlrmflow.model.told"
    # and the model's history says so (benchmarks/month.py: nights failed in preprocessing left no line)
    [line] = registry.history(registry.model_uri(str(tmp_path / "store"), "told"))
    assert (line["date"], line["decision"], line["stage"], line["reason"]) == (DAY, "failed", "setup",
                                                                               f"failed at setup: {error}")


def test_a_failing_notification_does_not_mask_the_failure(prefect_harness, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/hook"   # nothing listens there
    config = _failing_night(tmp_path, "untold", _webhook_block("dlrmflow-test-dead", dead))
    state = pipeline(config, date=dt.date.fromisoformat(DAY), return_state=True)
    assert state.is_failed() and DAY in state.message and "notify" not in state.message
    assert logs_matching("could not notify custom-webhook/dlrmflow-test-dead of the failed night")
    assert _events(events.NIGHT_FAILED, "untold")


def test_catchup_latest_skips_a_night_older_than_a_decided_one(prefect_harness, tmp_path):
    """The scheduled night (yesterday) is older than a night the model decided: it records itself as skipped and
    trains nothing (its days do not even exist)."""
    store = tmp_path / "store"
    model = registry.model_uri(str(store), "late")
    later = (dt.date.today() + dt.timedelta(days=3)).isoformat()
    (store / "models" / "late").mkdir(parents=True)
    (store / "models" / "late" / registry.HISTORY_FILE).write_text(json.dumps({"date": later, "decision": "kept"}) + "\n")
    failing = _failing_night(tmp_path, "late", None)
    config = failing.model_copy(update={"night": failing.night.model_copy(update={"catchup": "latest"})})
    out = pipeline(config)
    night = (dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)).isoformat()
    assert out["date"] == night and out["skipped"] == f"catchup latest: the model already decided a later night ({later})"
    last = registry.history(model)[-1]
    assert (last["date"], last["decision"], last["reason"]) == (night, "skipped", out["skipped"])
    assert not (store / "datasets").exists() and not (store / "runs").exists()
    [event] = _events(events.NIGHT_COMPLETED, "late")
    assert event.payload["date"] == night and event.payload["skipped"] == out["skipped"]


def test_a_promotion_emits_the_decision_numbers(prefect_harness):
    from prefect import flow

    decision = {"decision": "promoted", "reason": "challenger AUC 0.7000 >= champion AUC 0.6900 + margin 0",
                "challenger": {"auc": 0.7, "logloss": 0.5, "rows": 1000},
                "champion": {"auc": 0.69, "logloss": 0.51, "rows": 1000}, "champion_run": "runs/a",
                "promote_margin": 0.0}

    @flow
    def night():
        events.completed("promoted-model", {"date": DAY, "run": "runs/b", "decision": decision,
                                            "metrics": {"auc": 0.7, "logloss": 0.5, "rows": 1000, "step": 8}})

    night()
    [promoted] = _events(events.MODEL_PROMOTED, "promoted-model")
    assert promoted.payload["challenger"] == decision["challenger"] and promoted.payload["champion_run"] == "runs/a"
    [completed] = _events(events.NIGHT_COMPLETED, "promoted-model")
    assert completed.payload["metrics"]["step"] == 8 and completed.payload["decision"] == "promoted"


def test_a_damaged_history_fails_the_night_at_setup_before_any_work(prefect_harness, tmp_path):
    """history.jsonl is read after training to record the night: a damaged line is found at setup instead, so no
    hours are spent on a night that could not be recorded (issue 34 §4)."""
    store = tmp_path / "store"
    (store / "models" / "damaged").mkdir(parents=True)
    (store / "models" / "damaged" / registry.HISTORY_FILE).write_text('{"date": "2026-11-01", "decision": "kep\n')
    config = small_pipeline(str(store), window={"train_days": 2}, model="damaged")
    state = pipeline(config, date=dt.date.fromisoformat(DAY), return_state=True)
    assert state.is_failed()
    error = state.message.splitlines()[0]
    assert "damaged/history.jsonl line 1 is not JSON" in error and error.endswith("Fix: repair or remove that line.")
    assert not (store / "synthetic").exists() and not (store / "datasets").exists() and not (store / "runs").exists()


def test_a_degraded_champion_notifies_the_webhook_block_and_emits_an_event(prefect_harness):
    """A night whose champion fell out of its band while no challenger won (``models.watch``): the block is told and
    ``dlrmflow.model.degraded`` names why; a night that promoted announces nothing."""
    import logging

    why = ["champion AUC 0.7000 below the median 0.7500 of its last 5 nights minus watch_auc_drop 0.02"]
    entry = {"date": DAY, "decision": "kept", "reason": "champion kept: gate promote_margin: ...",
             "champion_run": "/store/runs/r1", "watch": {"nights": 5, "auc": 0.7, "degraded": why}}
    log = logging.getLogger("test")
    with webhook() as (url, bodies):
        block = _webhook_block("dlrmflow-test-degraded", url)
        assert events.degraded("watched", entry | {"decision": "promoted"}, block, log) == []
        assert events.degraded("watched", entry, block, log) == why
    [body] = bodies
    assert body["subject"] == f"dlrmflow: the champion of model watched degraded on {DAY}"
    assert why[0] in body["text"] and "/store/runs/r1" in body["text"]
    [event] = _events(events.MODEL_DEGRADED, "watched")
    assert (event.payload["why"], event.payload["date"], event.payload["champion_run"]) == (why, DAY, "/store/runs/r1")
