"""Preprocessing on a full disk (issue 34, section 4): the dataset's split files are refused before they are written
when less space is free than their planned bytes, and a copy that runs out of space is one line naming the file,
the free space and the fix, its partial file removed (a real tmpfs); an input file's parse is refused when the
folder of its parts has less free space than the file's size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from common.space import NoSpace
from helpers.tmpfs import needs_tmpfs, run_on_tmpfs
from preprocessing.work import FileParts, Mirror

WRITES = r"""
import json, os, sys
from pathlib import Path
from common.space import NoSpace
from preprocessing import writer

mount, parts, out = Path(sys.argv[1]), Path(sys.argv[2]), {}
for name, sizes in (("planned", {"train/label.bin": 1 << 20}), ("unplanned", None)):
    dataset = str(mount / "datasets" / name)
    try:
        writer.write_splits(dataset, [parts], ["train"], ["label.bin"], sizes=sizes)
        out[name] = "written"
    except NoSpace as e:
        out[name] = str(e)
out["left"] = sorted(str(p.relative_to(mount)) for p in mount.rglob("*") if p.is_file())
print(json.dumps(out))
"""


@needs_tmpfs
def test_split_files_larger_than_the_free_space_are_refused_or_named_when_the_disk_fills(tmp_path):
    parts = tmp_path / "part0"
    (parts / "train").mkdir(parents=True)
    (parts / "train" / "label.bin").write_bytes(bytes(1 << 20))   # 1 MiB into a 256 KiB disk
    mount = tmp_path / "store"
    got = run_on_tmpfs(WRITES, mount, "256k", str(parts))
    fix = (f"Fix: free space on {mount} (`dlrmflow gc` removes what the store no longer needs), or point --store "
           "elsewhere; running the same command again resumes from the parts already made")
    assert got["planned"] == (f"not enough free space to write the split files of {mount}/datasets/planned at "
                              f"{mount}/datasets/planned: it needs about 1.0 MiB (their planned bytes), free: 256 KiB "
                              f"of 256 KiB on {mount}. {fix}"), got
    assert re.fullmatch(rf"no space left on device writing {mount}/datasets/unplanned/train/label\.bin \(free: \d+ KiB "
                        rf"of 256 KiB on {mount}\)\. {re.escape(fix)}", got["unplanned"]), got
    assert got["left"] == []   # no partial file, no temporary file


def test_a_parse_is_refused_when_its_parts_folder_has_less_free_space_than_the_input(tmp_path, monkeypatch):
    parts = FileParts.locate(Mirror(tmp_path / "work"), "k1")
    monkeypatch.setattr("common.space.usage", lambda uri: (5 << 20, 50 << 30, "/store"))   # 5 MiB free
    parts.create({"uri": "/in/day0.tsv", "size": 4 << 20, "version": "v"})   # 4 MiB: room
    assert (parts.root / "entry.json").exists()
    with pytest.raises(NoSpace, match=rf"^not enough free space to write the parsed parts of /in/day1\.tsv at "
                                      rf"{tmp_path}/work/_files/k2: it needs about 6\.0 MiB \(about the input file's "
                                      r"size\), free: 5\.0 MiB of 50 GiB on /store\. Fix: free space on /store "
                                      r"\(`dlrmflow gc` removes parsed parts that no dataset needs\), or point "
                                      r"--work-dir \(or --store\) at a filesystem with room; "):
        FileParts.locate(Mirror(tmp_path / "work"), "k2").create({"uri": "/in/day1.tsv", "size": 6 << 20,
                                                                  "version": "v"})
    assert not Path(tmp_path / "work" / "_files" / "k2").exists()
