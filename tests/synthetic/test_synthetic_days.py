"""Synthetic days: one folder per date, a planted model that drifts, bytes that depend only on the day."""

from __future__ import annotations

import datetime as dt
import json

import fsspec
import numpy as np
import polars as pl
import pytest
from helpers.datasets import read_tsv

from flows.cli import main
from common.metrics import roc_auc
from synthetic.generator import (EPOCH, METADATA_FILE, SynthConfig, SyntheticData, day_folder, generate_days,
                                 read_day, write_days)

NOV = dt.date(2026, 11, 1)


def folder_bytes(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def days_config(out, start, days, **options) -> SynthConfig:
    return SynthConfig(out=str(out), start=start, days=days, **{"rows_per_day": 3_000, "workers": 1, **options})


def test_a_day_depends_only_on_its_date(tmp_path):
    """Around the epoch (negative, zero and positive day indices): a day alone equals that day of a longer run."""
    run = generate_days(str(tmp_path / "run"), "2025-12-31", 3, 3_000, files=2, gzip=True, seed=5, workers=1)
    alone = generate_days(str(tmp_path / "alone"), EPOCH, 1, 3_000, files=2, gzip=True, seed=5, workers=1)
    assert [m["date"] for m in run] == ["2025-12-31", "2026-01-01", "2026-01-02"]
    assert [m["drift"]["day_index"] for m in run] == [-1, 0, 1]
    assert run[1] == alone[0]
    days = {d: folder_bytes(tmp_path / "run" / d) for d in ("2025-12-31", "2026-01-01", "2026-01-02")}
    assert days["2026-01-01"] == folder_bytes(tmp_path / "alone" / "2026-01-01")
    assert list(days["2026-01-01"]) == [METADATA_FILE, "part-00000.tsv.gz", "part-00001.tsv.gz"]
    parts = [{n: b for n, b in files.items() if n != METADATA_FILE} for files in days.values()]
    assert parts[0] != parts[1] != parts[2]  # each day has its own rows
    other_seed = generate_days(str(tmp_path / "seed6"), EPOCH, 1, 3_000, files=2, gzip=True, seed=6, workers=1)
    assert folder_bytes(tmp_path / "seed6" / "2026-01-01")["part-00000.tsv.gz"] != parts[1]["part-00000.tsv.gz"]
    assert other_seed[0]["best_auc"] != alone[0]["best_auc"]


def test_day_metadata_matches_the_written_rows(tmp_path):
    config = days_config(tmp_path, NOV, 1)
    (meta,) = write_days(config)
    folder = tmp_path / "2026-11-01"
    assert day_folder(str(tmp_path), "2026-11-01") == str(folder)
    assert json.loads((folder / METADATA_FILE).read_text()) == meta
    df = read_tsv(folder / "part-00000.tsv")
    labels = df["label"].cast(pl.Int8).to_numpy().astype(bool)
    block = SyntheticData(config, NOV).block(0)
    assert np.array_equal(labels, block.label) and df.height == meta["rows"] == 3_000
    assert meta["best_auc"] == pytest.approx(roc_auc(block.probability, labels), abs=1e-12)
    assert meta["label_rate"] == pytest.approx(labels.mean())
    assert 0.65 < meta["best_auc"] < 0.9 and meta["best_logloss"] > 0
    assert meta["date"] == "2026-11-01" and meta["drift"]["day_index"] == (NOV - EPOCH).days
    assert meta["config"]["rows_per_day"] == 3_000 and "start" not in meta["config"]


def test_the_planted_model_drifts(tmp_path):
    """Day 30 scored with day 0's TRUE model is much worse than with its own; yesterday's model is still good."""
    config = days_config(tmp_path, NOV, 1, rows_per_day=8_000)
    today = SyntheticData(config, NOV + dt.timedelta(days=30))
    rows = today.block(0)
    own = roc_auc(rows.probability, rows.label)
    by_age = {age: roc_auc(SyntheticData(config, NOV + dt.timedelta(days=30 - age)).model.probability(
        rows.values, rows.missing), rows.label) for age in (1, 30)}
    assert own - 0.03 < by_age[1] < own + 0.005
    assert by_age[30] < by_age[1] - 0.1
    assert by_age[1] > 0.7
    old_p = SyntheticData(config, NOV).model.probability(rows.values, rows.missing)
    assert np.corrcoef(old_p, rows.probability)[0, 1] < 0.8

    still = days_config(tmp_path, NOV, 1, drift=0)
    frozen = [SyntheticData(still, NOV + dt.timedelta(days=d)).model for d in (0, 30)]
    rows_mode = SyntheticData(SynthConfig(out=str(tmp_path), rows=3_000)).model
    for model in frozen:  # no drift: every day has the rows mode's planted model
        assert model.bias == rows_mode.bias and model.numerical == rows_mode.numerical
        assert all(np.array_equal(model.categorical[c], e) for c, e in rows_mode.categorical.items())


def seen_share(newer: pl.Series, older: pl.Series) -> float:
    """Share of ``newer``'s non-missing rows whose value also occurs in ``older``."""
    seen = set(older.drop_nulls())
    values = newer.drop_nulls()
    return sum(v in seen for v in values) / len(values)


def test_new_ids_appear_and_old_ones_fade(tmp_path):
    for drift, out in ((0.05, tmp_path / "drift"), (0.0, tmp_path / "still")):
        write_days(days_config(out, EPOCH, 1, drift=drift, rows_per_day=5_000))
        write_days(days_config(out, EPOCH + dt.timedelta(days=1), 1, drift=drift, rows_per_day=5_000))
        write_days(days_config(out, EPOCH + dt.timedelta(days=10), 1, drift=drift, rows_per_day=5_000))
    day = {(kind, d): read_tsv(tmp_path / kind / d / "part-00000.tsv")
           for kind in ("drift", "still") for d in ("2026-01-01", "2026-01-02", "2026-01-11")}
    for c in ("C4", "C10", "C26"):
        near = seen_share(day["drift", "2026-01-02"][c], day["drift", "2026-01-01"][c])
        far = seen_share(day["drift", "2026-01-11"][c], day["drift", "2026-01-01"][c])
        frozen = seen_share(day["still", "2026-01-11"][c], day["still", "2026-01-01"][c])
        assert 0.2 < far < near - 0.05 and far < frozen - 0.05, (c, near, far, frozen)
        new_ids = set(day["drift", "2026-01-11"][c].drop_nulls()) - set(day["drift", "2026-01-01"][c].drop_nulls())
        gone_ids = set(day["drift", "2026-01-01"][c].drop_nulls()) - set(day["drift", "2026-01-11"][c].drop_nulls())
        assert new_ids and gone_ids
        tops = {d: day["drift", d][c].drop_nulls().mode().sort()[0] for d in ("2026-01-01", "2026-01-11")}
        assert tops["2026-01-01"] == tops["2026-01-11"]  # the head keeps its ids


def test_complete_days_are_reused(tmp_path):
    first = write_days(days_config(tmp_path, NOV, 2))
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    again = write_days(days_config(tmp_path, NOV + dt.timedelta(days=1), 2))
    assert again[0] == first[1]
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # nothing rewritten
    assert (tmp_path / "2026-11-03" / METADATA_FILE).exists()
    other = days_config(tmp_path, NOV, 1, seed=9)
    assert read_day(other, NOV) is None
    (rewritten,) = write_days(other)  # another seed: the day is rewritten for it
    assert rewritten["config"]["seed"] == 9 and read_day(other, NOV) == rewritten
    (tmp_path / "2026-11-02" / "part-00000.tsv").unlink()
    assert read_day(days_config(tmp_path, NOV, 1), NOV + dt.timedelta(days=1)) is None


def test_memory_uri():
    (meta,) = generate_days("memory://synth-days/out", "2026-11-05", 1, 1_000, seed=2)
    fs = fsspec.filesystem("memory")
    assert json.loads(fs.cat("/synth-days/out/2026-11-05/" + METADATA_FILE)) == meta
    assert len(fs.cat("/synth-days/out/2026-11-05/part-00000.tsv").splitlines()) == 1_000


def test_cli_days(tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["synth", "--days", "2", "--start", "2026-11-01", "--rows-per-day", "1k", "--files", "2",
                 "--workers", "1", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / d / METADATA_FILE) for d in ("2026-11-01", "2026-11-02")]
    for d in ("2026-11-01", "2026-11-02"):
        meta = json.loads((out / d / METADATA_FILE).read_text())
        assert meta["date"] == d and [f["rows"] for f in meta["files"]] == [500, 500]
        assert sorted(p.name for p in (out / d).iterdir()) == [METADATA_FILE, "part-00000.tsv", "part-00001.tsv"]


@pytest.mark.parametrize("argv, says", [
    (["--days", "3", "--rows-per-day", "1k"], "--days needs --start"),
    (["--days", "3", "--start", "2026-13-01", "--rows-per-day", "1k"], "not a date: '2026-13-01'"),
    (["--days", "3", "--start", "1.11.2026", "--rows-per-day", "1k"], "not a date: '1.11.2026'"),
    (["--days", "3", "--start", "2026-11-01"], "--days needs --rows-per-day"),
    (["--rows", "1k", "--days", "3", "--start", "2026-11-01"], "--rows and --days exclude each other"),
    (["--rows", "1k", "--start", "2026-11-01"], "--start without --days"),
    (["--days", "2", "--start", "2026-11-01", "--rows-per-day", "1k", "--drift", "-0.1"], "drift"),
])
def test_cli_bad_options(tmp_path, capsys, argv, says):
    assert main(["synth", *argv, "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
    assert not (tmp_path / "bad").exists()
