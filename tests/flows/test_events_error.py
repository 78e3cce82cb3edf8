"""flows.events.error_of: the one line a failed night's history line, event and notification record."""

from __future__ import annotations

from flows.events import error_of


def test_a_rank_jobs_failure_keeps_the_ranks_own_error_line():
    message = ("training failed: rank 0, exit code 2. Last lines of rank 0:\nFITS: the fullest rank uses 0%\n"
               "error (rank 0): /s/runs/r/checkpoints/78: checkpoint file __0_0.distcp differs from what was saved "
               "(...). The checkpoint is damaged and is not loaded. Fix: restore it from a backup.\n"
               "Run the pipeline again to resume from the start (no complete checkpoint).\n")
    assert error_of(message, "x") == ("training failed: rank 0, exit code 2. Last lines of rank 0: error (rank 0): "
                                      "/s/runs/r/checkpoints/78: checkpoint file __0_0.distcp differs from what was "
                                      "saved (...). The checkpoint is damaged and is not loaded. Fix: restore it from "
                                      "a backup.")


def test_any_other_message_is_its_first_line():
    assert error_of("no input for the test day 2026-11-05: ...\nmore", "x") == "no input for the test day 2026-11-05: ..."
    assert error_of("", "the run ended crashed") == "the run ended crashed"
    assert error_of(None, "the run ended failed") == "the run ended failed"


def test_a_huge_error_is_kept_short_and_its_event_can_be_emitted():
    from prefect.events import Event

    from flows.events import bounded_payload, resource

    huge = "bad.tsv: line 11: value '" + "x" * (5 << 20) + "' is not a number."
    line = error_of(huge, "x")
    assert line.startswith("bad.tsv: line 11: value 'xxx") and len(line) < 2100 and "more characters)" in line
    payload = bounded_payload({"date": "2026-11-05", "error": huge, "checks": [{"why": huge}] * 1000,
                               "left_out": {f"2026-{i}": huge for i in range(1000)}})
    assert payload["date"] == "2026-11-05" and len(payload["error"]) < 2100
    event = Event(event="dlrmflow.night.failed", resource=resource("m"), payload=payload)
    assert event.size_bytes < 300_000   # Prefect refuses events over 1.5 MB (EventTooLarge)
