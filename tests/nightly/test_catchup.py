"""The catchup policy after an outage (issue 19, section 8), without a server: which scheduled nights are
skipped (nightly.window.catchup_skip) and the skipped line in the model's history (models.registry)."""

from __future__ import annotations

import datetime as dt

from models import registry
from nightly.window import catchup_skip

D = dt.date(2026, 11, 8)


def _day(offset: int) -> dt.date:
    return D + dt.timedelta(days=offset)


def test_all_runs_every_night():
    assert catchup_skip(D, "all", due=[_day(1), _day(2)], decided=[_day(3)]) is None


def test_latest_runs_only_the_newest_due_night():
    outage = [_day(0), _day(1), _day(2)]   # three missed nights, due at once when the server is back
    skipped = {d: catchup_skip(d, "latest", due=[o for o in outage if o != d], decided=[]) for d in outage}
    assert skipped == {_day(0): "catchup latest: a newer night (2026-11-10) is due too",
                       _day(1): "catchup latest: a newer night (2026-11-10) is due too", _day(2): None}


def test_latest_skips_a_night_older_than_a_decided_one_and_runs_a_new_one():
    assert catchup_skip(D, "latest", due=[_day(-1)], decided=[_day(-2), _day(2)]) == \
        "catchup latest: the model already decided a later night (2026-11-10)"
    assert catchup_skip(D, "latest", due=[_day(-1)], decided=[_day(-2), D]) is None   # a re-run of a decided night


def test_a_skipped_night_is_recorded_once_and_is_no_decision(tmp_path):
    model = registry.model_uri(str(tmp_path), "m")
    line = registry.record_skipped(model, "2026-11-08", "catchup latest: a newer night (2026-11-10) is due too")
    again = registry.record_skipped(model, "2026-11-08", "another reason")
    assert again == line and registry.history(model) == [line]
    assert (line["decision"], line["run"], line["reason"]) == \
        ("skipped", None, "catchup latest: a newer night (2026-11-10) is due too")
    assert registry.decided_dates(model) == [] and registry.windows_in_use(str(tmp_path)) == {}
    assert registry.load_champion(model) is None
