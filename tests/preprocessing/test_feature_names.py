"""Feature names are data: a spec's hostile or odd feature names never name a file outside the dataset's folders
(its columns, vocabularies and counts are each one safe file-name segment), and two names never share a file."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import feature_spec as fspec
from feature_spec import categorical_file_name, path_segment
from preprocessing import PreprocessConfig, run


def test_path_segment_keeps_safe_names_and_maps_the_rest_to_one_distinct_segment():
    for safe in ("C1", "cat_3", "education-num", "a.b", "_x"):
        assert path_segment(safe) == safe
    assert categorical_file_name("C1") == "cat_C1.bin" and categorical_file_name("cat_7.bin") == "cat_7.bin"
    hostile = ["../../../../x", "/etc/passwd", "..", ".", "", "a/b", "a b", "a_b ", "-rf", "x" * 300, "é"]
    segments = [path_segment(name) for name in hostile]
    assert len(set(segments)) == len(hostile)
    for segment in segments + [categorical_file_name(n) for n in hostile]:
        assert "/" not in segment and "\\" not in segment and not segment.startswith((".", "-"))
        assert 0 < len(segment) <= 120 and Path(segment).name == segment
    assert categorical_file_name("cat_../../x.bin") != "cat_../../x.bin"


def test_a_spec_with_hostile_feature_names_writes_only_inside_the_store(tmp_path):
    store = tmp_path / "a" / "b" / "c" / "store"   # '../' x4 from any folder inside lands in tmp_path, not above
    store.mkdir(parents=True)
    absolute = str(tmp_path / "abs" / "evil")
    names = ["../../../../x", absolute, "ok"]
    spec = ("feature_spec:\n  click: {}\n  n: {}\n" + "".join(f"  {n!r}: {{dtype: str}}\n" for n in names) +
            "channel_spec:\n  label: [click]\n  numerical: [n]\n  categorical: [" + ", ".join(map(repr, names)) +
            "]\n")
    (tmp_path / "spec.yaml").write_text(spec)
    rows = "".join(f"{i % 2},{i},v{i % 3},w{i % 2},z{i % 4}\n" for i in range(40))
    (tmp_path / "t.csv").write_text('click,n,"../../../../x",' + f'"{absolute}",ok\n' + rows)
    before = {p for p in tmp_path.rglob("*")}

    ds = Path(run(PreprocessConfig(inputs=[str(tmp_path / "t.csv")], spec=str(tmp_path / "spec.yaml"),
                                   out=str(store), split="ordered:train=1",
                                   frequency_threshold=0, progress=False)))
    outside = {p for p in tmp_path.rglob("*") if p.is_file() and store not in p.parents} - before
    assert outside == set()
    assert not (tmp_path / "abs").exists() and not any(tmp_path.rglob("x.*"))
    loaded = fspec.load(str(ds))
    assert loaded.categorical_features == names
    written = sorted(p.name for p in (ds / "train").iterdir())
    assert sorted(categorical_file_name(n) for n in names) == [f for f in written if f.startswith("cat_")]
    assert {p.name for p in (ds / "vocab").iterdir()} == {f"{path_segment(n)}.parquet" for n in names}
    column = np.fromfile(ds / "train" / categorical_file_name(names[0]), dtype=np.dtype(loaded.feature_spec[names[0]].dtype))
    assert len(column) == 40 and len(set(column.tolist())) == 3
