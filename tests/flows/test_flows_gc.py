"""`dlrmflow gc` in this interpreter (``flows.cli.main``): the table of what went (or would go) and one clean line
for a bad store; and the pipeline's gc task (``flows.gc``, its function without a Prefect run): the night's
settings become the clean-up's, its model's next window keeps its parsed parts, and a store it cannot clean
safely keeps everything with a warning instead of failing the night. (The rule itself: tests/nightly/test_gc.py.)"""

from __future__ import annotations

import datetime as dt

import pytest

from flows import gc as flows_gc
from flows.cli import main
from nightly.config import PipelineConfig
from helpers import stores
from models import registry
from models.config import GcConfig
from nightly.window import window
from preprocessing.dated import fill_date
from preprocessing.work import FileParts, Mirror, file_parts


def test_dlrmflow_gc_prints_what_it_removes(tmp_path, capsys):
    root = str(tmp_path / "store")
    stores.run(root, "r-old", stores.dataset(root, "d-old", days_old=20), days_old=20)
    stores.dataset(root, "d-new")
    assert main(["gc", "--store", root, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["kind", "what", "size", "why"]
    assert [line.split()[:2] for line in out[1:3]] == [["run", "runs/r-old"], ["dataset", "datasets/d-old"]]
    assert out[-1].startswith(f"gc of {root}: would remove 2 item(s), ")
    assert main(["gc", "--store", root, "--keep-nights", "30"]) == 0   # 20 days old: kept for 30
    assert capsys.readouterr().out.strip() == f"gc of {root}: nothing to remove"
    assert main(["gc", "--store", root]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"gc of {root}: removed 2 item(s), ")
    assert sorted(p.name for p in (tmp_path / "store" / "datasets").iterdir()) == ["d-new"]


@pytest.mark.parametrize("args, message", [
    (["--store", "gs://bucket/x"], "error: store 'gs://bucket/x': unsupported scheme 'gs'. Fix: use a local folder"),
    (["--store", "{tmp}/none"], "error: store '{tmp}/none' does not exist, so there is nothing to clean. Fix: check "
                                "--store."),
    (["--store", "{tmp}", "--keep-nights", "0"], "keep_nights: Input should be greater than or equal to 1"),
])
def test_a_bad_store_or_setting_is_one_line_without_a_traceback(args, message, tmp_path, capsys):
    code = main(["gc", *(a.replace("{tmp}", str(tmp_path)) for a in args)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and message.replace("{tmp}", str(tmp_path)) in err, err


class _Log:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def info(self, msg, *args):
        self.lines.append(("info", msg % args))

    def warning(self, msg, *args):
        self.lines.append(("warning", msg % args))


DATE = dt.date(2026, 11, 20)


def test_the_pipelines_gc_keeps_its_models_next_window_and_never_fails_the_night(tmp_path, monkeypatch):
    template = str(tmp_path / "logs" / "{date}" / "part-0.tsv")
    store = str(tmp_path / "store")
    mirror = Mirror.locate(None, store)
    for k in range(6):   # 11-15 .. 11-20, each with its stored parts
        day = DATE - dt.timedelta(days=k)
        (tmp_path / "logs" / day.isoformat()).mkdir(parents=True)
        (tmp_path / "logs" / day.isoformat() / "part-0.tsv").write_text("")
        FileParts.locate(mirror, f"key-{day}").create({"uri": fill_date(template, day), "size": 0, "version": None})
    config = PipelineConfig(store=store, model="m", preprocess={"inputs": [template]},
                            window={"train_days": 2, "retain_days": 1}, gc={"keep_nights": 3})
    assert config.gc_config(store, [template]) == GcConfig(store=store, keep_nights=3, inputs=[template],
                                                           retain_days=1)
    log, tables = _Log(), []
    monkeypatch.setattr(flows_gc, "get_run_logger", lambda: log)
    monkeypatch.setattr(flows_gc.artifacts, "gc_table", tables.append)
    out = flows_gc.gc.fn(config, store, window([template], DATE, config.window))
    # the next night reads 11-19 and 11-20; retain_days keeps 11-18 too
    assert file_parts(store) == [fill_date(template, DATE - dt.timedelta(days=k)) for k in (2, 1, 0)]
    assert out == {"removed": 3, "bytes": tables[0].bytes, "dry_run": False}
    assert ("info", f"gc of {store}: removed 3 item(s), {flows_gc.cleanup.human_bytes(tables[0].bytes)} freed") \
        in log.lines
    (tmp_path / "store" / "models" / "m").mkdir(parents=True)
    (tmp_path / "store" / "models" / "m" / registry.HISTORY_FILE).write_text("{not json\n")
    out = flows_gc.gc.fn(config, store, window([template], DATE, config.window))
    assert out["removed"] == 0 and "line 1 is not JSON" in out["error"]
    assert log.lines[-1][0] == "warning" and log.lines[-1][1].startswith("gc removed nothing: ")
