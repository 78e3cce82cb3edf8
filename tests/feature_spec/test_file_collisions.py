"""Two features never share a file: a spec whose feature names map to one file name (``x`` and ``cat_x.bin``, ``a/b``
and the safe segment of ``a/b``) is refused when it is loaded or validated, naming both features and the file;
preprocessing never starts on it."""

from __future__ import annotations

import pytest

import feature_spec as fspec
from common.config import load_yaml
from feature_spec import FeatureSpec, SpecError, path_segment
from preprocessing import PreprocessConfig, run


def _spec(*categorical: str, options: str = "{dtype: str}") -> str:
    return ("feature_spec:\n  y: {}\n" + "".join(f"  {n!r}: {options}\n" for n in categorical)
            + "channel_spec:\n  label: [y]\n  categorical: [" + ", ".join(map(repr, categorical)) + "]\n")


@pytest.mark.parametrize("first,second,path", [
    ("x", "cat_x.bin", "<split>/cat_x.bin"),
    ("a/b", path_segment("a/b"), f"<split>/cat_{path_segment('a/b')}.bin"),
])
def test_features_that_would_share_a_file_are_refused_at_load(tmp_path, first, second, path):
    assert path_segment("a/b") == "a_b-82badf67"   # the review's example
    spec = tmp_path / "spec.yaml"
    spec.write_text(_spec(first, second))
    with pytest.raises(SpecError) as e:
        fspec.load(str(spec))
    message = str(e.value)
    assert f"features '{first}' and '{second}' would share the file {path}" in message and str(spec) in message
    assert "\n" not in message and "Fix: rename" in message


def test_a_list_feature_s_offsets_file_is_its_own(tmp_path):
    data = load_yaml(_spec("x", "cat_x.offsets.bin", options="{dtype: str, hotness: variable, sep: '|'}"))
    with pytest.raises(SpecError, match=r"'x' and 'cat_x.offsets.bin' would share the file <split>/cat_x.offsets.bin"):
        FeatureSpec.model_validate(data).validate_spec()


def test_a_dataset_whose_chunks_list_one_file_twice_is_refused():
    spec = fspec.criteo_spec()
    data = spec.model_dump(mode="json")
    data["metadata"] = {}
    data["feature_spec"] = {"label": {"dtype": "bool"}, **{n: {"dtype": "float16"} for n in spec.numerical_features},
                            **{c: {"dtype": "int8", "cardinality": 10} for c in spec.categorical_features}}
    data["source_spec"] = {"train": [{"type": "split_binary", "features": ["label"], "files": ["train/label.bin"]},
                                     {"type": "split_binary", "features": [f"I{i}" for i in range(1, 14)],
                                      "files": ["train/numerical.bin"]}]
                           + [{"type": "split_binary", "features": [c], "files": ["train/cat_C1.bin" if c == "C2"
                                                                                   else f"train/cat_{c}.bin"]}
                              for c in spec.categorical_features]}
    with pytest.raises(SpecError, match=r"features 'C1' and 'C2' would share the file train/cat_C1.bin"):
        FeatureSpec.model_validate(data).validate_spec()
    data["source_spec"]["train"][3]["files"] = ["train/cat_C2.bin"]
    FeatureSpec.model_validate(data).validate_spec()   # each its own: a dataset


def test_preprocessing_never_starts_on_such_a_spec(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(_spec("a/b", "a_b-82badf67"))
    data = tmp_path / "day.csv"
    data.write_text("y,a/b,a_b-82badf67\n" + "".join(f"{i % 2},u{i % 3},v{i % 5}\n" for i in range(40)))
    with pytest.raises(SpecError, match="features 'a/b' and 'a_b-82badf67' would share the file"):
        run(PreprocessConfig(inputs=[str(data)], out=str(tmp_path / "store"), spec=str(spec), progress=False))
    assert not list((tmp_path / "store").rglob("_SUCCESS"))
