"""Progress a person reads (``common.progress``): a tqdm bar on a terminal, else a line per tenth of the way."""

from __future__ import annotations

import io

from common.progress import ENV, Lines, mode, progress


def test_piped_progress_is_a_line_per_tenth_with_thousands_and_units(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    out = io.StringIO()   # not a terminal
    bar = progress(1000, "train", "step", stream=out)
    assert isinstance(bar, Lines)
    for step in range(1000):
        bar.set_postfix({"rows/s": f"{1234 + step:,}", "loss": f"{0.4567:.4f}"}, refresh=False)
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10   # 1000 updates; the last one at 100%, not repeated by close()
    assert lines[3] == "train: step 400/1,000 (40%), 1,633 rows/s, loss 0.4567"
    assert lines[-1].startswith("train: step 1,000/1,000 (100%), ")


def test_rows_get_their_rate_and_a_slow_job_a_line_every_interval(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    out = io.StringIO()
    with progress(3_000_000, "synth", "rows", stream=out, every_s=0) as bar:   # every update is due
        bar.update(1_500_000)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("synth: 1,500,000/3,000,000 rows (50%), ") and \
        lines[0].endswith(" rows/s")
    with progress(10, "synth", "rows", stream=out, disable=True) as bar:
        bar.update(10)
    assert out.getvalue().splitlines() == lines   # disabled (another rank, --quiet): nothing


def test_the_environment_chooses_for_a_process_whose_output_is_piped(monkeypatch):
    monkeypatch.setenv(ENV, "bar")
    assert mode(io.StringIO()) == "bar"   # a rank: the launcher saw a terminal
    monkeypatch.setenv(ENV, "lines")
    assert mode() == "lines"
    monkeypatch.delenv(ENV)
    assert mode(io.StringIO()) == "lines"
