"""Invariants that turn silent loss into a loud error (issue 19, section 2): a missing or unreadable part fails
naming its input file (and a rerun parses it again), a finished dataset is never written again, `inspect --verify`
names every damaged file, the bad-row budget holds for each file (the size check on loading: tests/training/
test_training_data.py)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

import feature_spec as fspec
from common.errors import UserError
from preprocessing import PreprocessConfig, Preprocessing, prune_file_parts, run
from preprocessing.parallel import ThreadExecutor

ROWS = {"train": 300, "val": 100, "test": 100}


@pytest.fixture(scope="module")
def raw(criteo_10k, tmp_path_factory) -> dict[str, Path]:
    """Three small day files of real Criteo rows, mapped to train/val/test."""
    root = tmp_path_factory.mktemp("raw")
    with gzip.open(criteo_10k, "rt") as f:
        lines = [next(f) for _ in range(sum(ROWS.values()))]
    start, files = 0, {}
    for split, n in ROWS.items():
        files[split] = root / f"{split}.tsv"
        files[split].write_text("".join(lines[start:start + n]))
        start += n
    return files


def _config(raw, out, **kw) -> PreprocessConfig:
    return PreprocessConfig(inputs=[f"{s}={p}" for s, p in raw.items()], out=str(out), progress=False,
                            workers=1, **kw)


@pytest.fixture(scope="module")
def dataset(raw, tmp_path_factory) -> Path:
    return Path(run(_config(raw, tmp_path_factory.mktemp("store"), frequency_threshold=2)))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class _Between(ThreadExecutor):
    """Threads, calling ``hook(stage)`` before each stage: another job acting between two stages of this one."""

    def __init__(self, hook):
        super().__init__(1, False)
        self.hook = hook

    def map(self, stage, fn, files, rows=None):
        self.hook(stage)
        return super().map(stage, fn, files, rows)

    def call(self, stage, fn):
        self.hook(stage)
        return super().call(stage, fn)


def _parts_of(store: Path, uri: Path) -> Path:
    import json
    return next(p.parent for p in (store / "_files").glob("*/entry.json") if json.loads(p.read_text())["uri"] ==
                str(uri))


@pytest.mark.parametrize("damage,stage,split,words", [
    ("pruned", "encode", "test", "its parsed part {} is missing (100 rows were parsed)"),
    ("truncated", "encode", "test", "its parsed part {} is unreadable"),
    ("pruned", "build_vocabulary", "train", "its part {} is missing (its counts were removed meanwhile)"),
])
def test_missing_or_unreadable_part_fails_naming_the_file_and_a_rerun_parses_it_again(raw, dataset, tmp_path,
                                                                                         damage, stage, split, words):
    store = tmp_path / "store"
    folder = {}

    def hook(now):   # the race: parts removed (a prune without leases, a damaged disk) between two stages
        if now != stage:
            return
        folder["parts"] = _parts_of(store, raw[split])
        if damage == "pruned":
            assert prune_file_parts(str(store), lambda uri: uri == str(raw[split])) == []   # the lease keeps them
            removed = folder["parts"] / ("parsed" if stage == "encode" else "counts")
            shutil.rmtree(removed)
        else:
            ipc = sorted((folder["parts"] / "parsed").glob("*.ipc"))[0]
            ipc.write_bytes(ipc.read_bytes()[:len(ipc.read_bytes()) // 2])

    job = Preprocessing(_config(raw, store, frequency_threshold=2))
    with pytest.raises(UserError) as e:
        job.run(_Between(hook), say=lambda _: None)
    msg = str(e.value)
    part = folder["parts"] / ("parsed" if stage == "encode" else "counts")
    assert msg.startswith(f"input file {raw[split]}: " + words.format(part))
    assert "Nothing was written to the dataset. Fix: run the same command again; the missing parts are made " \
           "again" in msg
    assert not list(store.glob("datasets/*/_SUCCESS")) and not list(store.glob("datasets/*/*/*.bin"))
    again = Path(run(_config(raw, store, frequency_threshold=2)))   # the damaged file's parse is made again
    assert again.name == dataset.name and _files(again) == _files(dataset)


def test_short_part_and_lost_work_folder_fail_before_the_dataset_is_written(raw, tmp_path):
    store = tmp_path / "store"
    job = Preprocessing(_config(raw, store, frequency_threshold=2))

    def hook(stage):   # another run of the same key removed this one's work folder (the second run)
        if stage == "write_dataset":
            job.job.work.remove()

    with pytest.raises(UserError, match=r"input file .*train.tsv: its encoded part .* is missing .* Fix: run the "
                                        r"same command again"):
        job.run(_Between(hook), say=lambda _: None)
    assert not list(store.glob("datasets/*/_SUCCESS"))


def test_split_rows_other_than_planned_fail_before_the_dataset_is_written(raw, tmp_path):
    import json

    store = tmp_path / "store"
    job = Preprocessing(_config(raw, store, frequency_threshold=2))

    def interrupt(stage):
        if stage == "write_dataset":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):   # an interrupted run leaves its encoded parts
        job.run(_Between(interrupt), say=lambda _: None)
    stats = job.job.work.encoded(2) / "stats.json"   # test.tsv's part now says its rows are val rows
    st = json.loads(stats.read_text())
    st["val"], st["test"] = st["test"], st["val"]
    stats.write_text(json.dumps(st))
    with pytest.raises(UserError, match=r"the encoded rows per split \{'train': 300, 'val': 200, 'test': 0\} are "
                                        r"not the planned ones \{'train': 300, 'val': 100, 'test': 100\}"):
        run(_config(raw, store, frequency_threshold=2))
    assert not list(store.glob("datasets/*/_SUCCESS")) and not list(store.glob("datasets/*/*/*.bin"))


class _NoLease:
    """A dataset lease that holds nothing: the writer's own refusal is what is under test (the lease, which keeps
    two jobs of one key apart, is tested in test_preprocess_leases.py)."""

    def check(self) -> None:
        pass

    def release(self) -> None:
        pass


def test_finished_dataset_is_never_written_again(raw, dataset, tmp_path, monkeypatch):
    from preprocessing import work, writer

    monkeypatch.setattr(work, "take_dataset_lease", lambda *a, **k: _NoLease())

    store = tmp_path / "store"
    second = Preprocessing(_config(raw, store, frequency_threshold=2))
    finished = {}
    said = []

    def hook(stage):   # a first run of the same key finishes (and removes its work folder) before the writer
        if stage == "write_dataset":
            finished["ds"] = Path(run(_config(raw, store, frequency_threshold=2)))
            finished["files"] = _files(finished["ds"])

    assert Path(second.run(_Between(hook), say=said.append)) == finished["ds"]
    assert "finished meanwhile by another run, reusing it" in said[-1]
    assert _files(finished["ds"]) == finished["files"] == _files(dataset)
    # finished by the other run while this one writes: the rest of this one's writes are refused, it reuses
    store, said = tmp_path / "store2", []
    third = Preprocessing(_config(raw, store, frequency_threshold=2))
    write_vocab = writer.write_vocab

    def other_run_finishes_first(dataset, sources):
        if "ds2" not in finished:   # (the other run's own writes go straight through)
            finished["ds2"] = Path("")
            finished["ds2"] = Path(run(_config(raw, store, frequency_threshold=2)))
            finished["files2"] = _files(finished["ds2"])
        return write_vocab(dataset, sources)

    monkeypatch.setattr(writer, "write_vocab", other_run_finishes_first)
    assert Path(third.run(_Between(lambda _: None), say=said.append)) == finished["ds2"]
    assert "finished meanwhile by another run, reusing it" in said[-1]
    assert _files(finished["ds2"]) == finished["files2"] == _files(dataset)
    monkeypatch.setattr(writer, "write_vocab", write_vocab)
    # the writer itself refuses: split files, vocabularies, the spec and _SUCCESS
    ds = str(finished["ds"])
    for write in (lambda: writer.write_splits(ds, [], ["train"], ["label.bin"]),
                  lambda: writer.write_vocab(ds, {"C1": tmp_path / "none.parquet"}),
                  lambda: writer.finish(ds, fspec.load(ds))):
        with pytest.raises(writer.FinishedDataset, match=f"{ds} is a finished dataset .* never written again"):
            write()
    assert _files(finished["ds"]) == finished["files"]


def test_inspect_verify(dataset, tmp_path, capsys):
    import shutil

    from flows.cli import main

    assert main(["inspect", str(dataset), "--verify"]) == 0
    assert "verified: " in capsys.readouterr().out
    copy = tmp_path / dataset.name
    shutil.copytree(dataset, copy)
    label = copy / "val" / "label.bin"   # same size, other content
    label.write_bytes(bytes(1 - b for b in label.read_bytes()))
    (copy / "train" / "cat_C3.bin").write_bytes(b"")
    (copy / "vocab" / "C5.parquet").unlink()
    assert main(["inspect", str(copy), "--verify"]) == 2
    err = capsys.readouterr().err
    assert "3 of " in err and "files do not match the dataset's metadata" in err
    assert "val/label.bin: checksum sha256:" in err and "differs from the recorded" in err
    need = fspec.load(str(dataset)).file_sizes("train")["train/cat_C3.bin"]
    assert need > 0 and f"train/cat_C3.bin: 0 bytes, the metadata's rows need {need}" in err
    assert "vocab/C5.parquet: missing" in err and "Fix: " in err


def test_inspect_verifies_blake2b_checksums_of_older_datasets(dataset, tmp_path, capsys):
    """Datasets written before the SHA-256 checksums record blake2b ones: they verify as before."""
    import hashlib

    from flows.cli import main

    copy = tmp_path / dataset.name
    shutil.copytree(dataset, copy)
    spec = fspec.load(str(copy))
    spec.metadata["checksums"] = {
        rel: "blake2b:" + hashlib.blake2b((copy / rel).read_bytes(), digest_size=32).hexdigest()
        for rel in spec.metadata["checksums"]}
    fspec.save(spec, str(copy))
    assert main(["inspect", str(copy), "--verify"]) == 0
    (copy / "val" / "label.bin").write_bytes(bytes(1 - b for b in (copy / "val" / "label.bin").read_bytes()))
    assert main(["inspect", str(copy), "--verify"]) == 2
    assert "val/label.bin: checksum blake2b:" in capsys.readouterr().err


def test_bad_row_budget_holds_for_each_day(raw, dataset, tmp_path):
    """A day whose rows are all malformed fails the window, though the window's total is within budget."""
    days = tmp_path / "days"
    days.mkdir()
    lines = raw["train"].read_text().splitlines(keepends=True) + raw["val"].read_text().splitlines(keepends=True)
    (days / "day1.tsv").write_text("".join(lines[:250]))
    (days / "day2.tsv").write_text("".join(lines[250:]))
    bad = days / "day3.tsv"
    bad.write_text("".join(ln.rstrip("\n") + "\textra\n" for ln in raw["test"].read_text().splitlines()[:3]))
    config = PreprocessConfig(inputs=[f"train={days / 'day1.tsv'}", f"train={days / 'day2.tsv'}", f"test={bad}"],
                              out=str(tmp_path / "store"), on_bad_row="skip", max_bad_fraction=0.01, progress=False)
    with pytest.raises(UserError) as e:   # 3 bad of 403 rows is 0.74%: within the window's budget
        run(config)
    assert str(e.value).startswith(f"input file {bad}: 3 of 3 rows are malformed (100.00%), more than "
                                   "--max-bad-fraction 0.01. Fix: ")
    # and when a model scores raw days with its dataset's encoders (3 bad of 303 rows in all)
    from preprocessing.apply import encode_inputs

    with pytest.raises(UserError, match=f"^input file {bad}: 3 of 3 rows are malformed"):
        encode_inputs(str(dataset), [str(raw["train"]), str(bad)], tmp_path / "enc", on_bad_row="skip",
                      max_bad_fraction=0.01, progress=False)


def test_final_write_without_copy_file_range_writes_the_same_dataset(raw, dataset, tmp_path, monkeypatch):
    """Where the kernel refuses to copy between the parts and the dataset (another filesystem, an old kernel),
    the final write falls back to plain writes: the same files and checksums."""
    import errno
    import os

    from flows.cli import main

    def refused(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refused)
    again = Path(run(_config(raw, tmp_path / "store", frequency_threshold=2)))
    assert _files(again) == _files(dataset)
    assert main(["inspect", str(again), "--verify"]) == 0
