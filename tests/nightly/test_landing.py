"""When a day has landed (issue 44 §3), without Prefect: the completeness rule (a _SUCCESS marker by default, at
least N files, a quiet period), the sensor's one look (``nightly.landing.scan``) over real folders and moto's S3
with the model's landed.jsonl as its memory, and the rule that a night started by the trigger or the schedule runs
once."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from common.errors import UserError
from models import registry
from nightly.config import LandingConfig
from nightly.landing import CHANGED, LANDED, WAITING, check, days_found, once, scan

D = dt.date(2026, 11, 5)
NOW = dt.datetime(2026, 11, 6, 1, 0, tzinfo=dt.timezone.utc)


def _write(fs, folder: str, names: dict[str, bytes]) -> None:
    fs.makedirs(folder, exist_ok=True)
    for name, data in names.items():
        fs.pipe(f"{folder}/{name}", data)


def _remember(model: str, found) -> None:   # what the sensor flow records after telling of the days
    registry.record_landed(model, [d.line(LANDED, NOW.isoformat()) for d in found.landed] + found.lines)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_day_lands_once_with_its_marker_and_a_reupload_is_said_once(where, tmp_path, request):
    import fsspec

    if where == "s3":
        request.getfixturevalue("s3_server")
        root, fs = "s3://store/logs", fsspec.filesystem("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    else:
        root, fs = str(tmp_path / "logs"), fsspec.filesystem("file")
    template, model, rule = f"{root}/{{date}}/part-*", str(tmp_path / "models" / "demo"), LandingConfig()
    _write(fs, f"{root}/2026-11-04", {"part-0": b"a"})            # no marker: never complete
    _write(fs, f"{root}/{D}", {"part-0": b"b", "part-1": b"cc"})   # files first, the marker not yet
    assert days_found([template]) == [dt.date(2026, 11, 4), D]
    found = scan([template], rule, model, NOW)
    assert (found.landed, found.lines, found.notes) == ([], [], [])

    _write(fs, f"{root}/{D}", {"_SUCCESS": b""})
    found = scan([template], rule, model, NOW)
    [day] = found.landed
    assert day.day == D and sorted(day.files) == [f"{root}/{D}/part-0", f"{root}/{D}/part-1"]
    assert found.notes == [f"day {D} landed: 2 file(s), a _SUCCESS marker in the day's folder"]
    identity = day.files[f"{root}/{D}/part-1"]
    assert identity.startswith("2:") and ("ino=" not in identity)   # size and mtime (S3: ETag), as verdicts key days
    _remember(model, found)

    again = scan([template], rule, model, NOW)   # a restart, the same files dropped again: nothing
    assert (again.landed, again.lines, again.notes) == ([], [], [])
    _write(fs, f"{root}/{D}", {"part-1": b"ccc"})   # a re-upload: said once, never told again
    changed = scan([template], rule, model, NOW)
    assert changed.landed == [] and [line["state"] for line in changed.lines] == [CHANGED]
    assert changed.notes[0].startswith(f"day {D}: its files changed since it landed (2 file(s) now); not told again")
    _remember(model, changed)
    assert scan([template], rule, model, NOW).notes == []
    assert [line["state"] for line in registry.landed(model)] == [LANDED, CHANGED]


def test_a_day_whose_night_ran_is_not_told_unless_it_failed(tmp_path):
    root, model = tmp_path / "logs", str(tmp_path / "models" / "demo")
    (root / str(D)).mkdir(parents=True)
    (root / str(D) / "part-0").write_text("x")
    (root / str(D) / "_SUCCESS").write_text("")
    template = f"{root}/{{date}}/part-*"
    registry.record_failed(model, D.isoformat(), "preprocess", "boom")   # a failed night runs again: a retry
    assert once(model, D) is None and [d.day for d in scan([template], LandingConfig(), model, NOW).landed] == [D]
    ran = str(tmp_path / "models" / "ran")   # a night that ran (here: skipped by the catch-up policy) is not told
    line = registry.record_skipped(ran, D.isoformat(), "catchup latest", owner="flow run brave-otter (1234)")
    assert scan([template], LandingConfig(), ran, NOW).landed == []
    assert once(ran, D) == (f"the night {D} already ran (skipped by flow run brave-otter (1234) at {line['at']}): a "
                            "night the day-landed trigger or the schedule starts runs once a day. To run it again, Run "
                            f"the pipeline with date {D}")
    assert once(model, D + dt.timedelta(days=1)) is None


def test_a_file_count_and_a_quiet_period_without_a_marker(tmp_path):
    root, model = tmp_path / "logs", str(tmp_path / "models" / "demo")
    day_folder = root / D.strftime("%Y/%m/%d")
    day_folder.mkdir(parents=True)
    (day_folder / "a.tsv").write_text("1")
    template = f"{root}/{{date:%Y/%m/%d}}/*.tsv"
    rule = LandingConfig(marker=None, files=2, quiet_s=600)
    assert days_found([template]) == [D]
    assert scan([template], rule, model, NOW).lines == []   # 1 of at least 2 files: not even waiting
    (day_folder / "b.tsv").write_text("2")
    first = scan([template], rule, model, NOW)   # the quiet period starts now
    assert first.landed == [] and [line["state"] for line in first.lines] == [WAITING]
    assert first.notes == [f"day {D}: waiting for 600 s without a change to its files"]
    _remember(model, first)
    assert scan([template], rule, model, NOW + dt.timedelta(seconds=599)).landed == []   # unchanged, not long enough
    (day_folder / "b.tsv").write_text("22")   # a change starts it again
    restarted = scan([template], rule, model, NOW + dt.timedelta(seconds=599))
    assert [line["state"] for line in restarted.lines] == [WAITING]
    _remember(model, restarted)
    later = NOW + dt.timedelta(seconds=599 + 600)
    assert [d.day for d in scan([template], rule, model, later).landed] == [D]


def test_inputs_the_sensor_cannot_watch_are_one_line_each(tmp_path):
    with pytest.raises(UserError, match=r"names a file, not a day's folder, so no _SUCCESS marker"):
        check([f"{tmp_path}/{{date}}.tsv"], LandingConfig())
    check([f"{tmp_path}/{{date}}.tsv"], LandingConfig(marker=None, files=1))   # a file a day: counted, no marker
    with pytest.raises(UserError, match=r"matches the day's marker _SUCCESS: the night would read it as data. Fix: "
                                        r"name the files \(e.g. .*/\{date\}/part-\*\)"):
        check([f"{tmp_path}/{{date}}/*"], LandingConfig())
    with pytest.raises(UserError, match="has no {date}"):
        check([f"{tmp_path}/all/part-*"], LandingConfig())
    with pytest.raises(ValueError, match="a day needs a rule that says it is complete"):
        LandingConfig(marker=None)
