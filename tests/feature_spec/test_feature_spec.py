"""The feature spec: NVIDIA-shaped specs load unchanged; bad specs fail naming section, feature and fix."""

from __future__ import annotations

import pytest
import yaml

import feature_spec as fs
from helpers.datasets import NVIDIA_YAML as NVIDIA_F15_SHAPE


def _nvidia() -> dict:
    return yaml.safe_load(NVIDIA_F15_SHAPE)


def test_nvidia_shaped_output_spec_loads_unchanged(tmp_path):
    path = tmp_path / "feature_spec.yaml"
    path.write_text(NVIDIA_F15_SHAPE)
    spec = fs.load(str(tmp_path))
    assert spec.is_dataset
    assert spec.splits == ["test", "train"]
    assert spec.label_feature == "label"
    assert spec.numerical_features == ["num_0", "num_1"]
    assert spec.categorical_features == ["cat_0.bin", "cat_1.bin", "cat_2.bin"]
    assert spec.cardinality("cat_0.bin") == 7912889
    assert spec.file_of("train", "num_1") == ("train/numerical.bin", 1)
    assert spec.file_of("test", "cat_2.bin") == ("test/cat_2.bin", 0)
    assert fs.file_uri(str(path), "train/label.bin") == f"{tmp_path}/train/label.bin"
    # its categorical files keep their names
    assert fs.categorical_file_name("cat_2.bin") == "cat_2.bin"


def test_save_load_roundtrip_is_identical(tmp_path):
    spec = fs.from_dict(_nvidia())
    uri = fs.save(spec, str(tmp_path / "ds"))
    again = fs.load(uri)
    assert again == spec
    assert fs.to_yaml(again) == fs.to_yaml(spec)
    assert not list((tmp_path / "ds").glob("*.tmp"))


def test_save_load_through_fsspec_memory():
    spec = fs.from_dict(_nvidia())
    fs.save(spec, "memory://specs/ds")
    assert fs.load("memory://specs/ds") == spec


def test_criteo_preset_is_the_40_column_layout():
    spec = fs.preset("criteo")
    assert [*spec.channel_spec["label"], *spec.numerical_features, *spec.categorical_features] == fs.CRITEO_COLUMNS
    assert len(fs.CRITEO_COLUMNS) == 40
    assert all(spec.feature_spec[c].dtype == "hex" for c in fs.CRITEO_CATEGORICAL)
    assert all(spec.feature_spec[n].transform == "log1p" for n in fs.CRITEO_NUMERICAL)
    assert not spec.is_dataset


@pytest.mark.parametrize("cardinality, dtype", [
    (1, "int8"), (126, "int8"), (127, "int16"), (32766, "int16"), (32767, "int32"),
    (2**31 - 2, "int32"), (2**31 - 1, "int64"), (10**12, "int64"),
])
def test_categorical_dtype_is_nvidias_smallest_type(cardinality, dtype):
    assert fs.categorical_dtype(cardinality) == dtype


def _expect(data, *fragments):
    with pytest.raises(fs.SpecError) as e:
        fs.from_dict(data, source="my_spec.yaml")
    msg = str(e.value)
    for fragment in ("my_spec.yaml", "Fix:", *fragments):
        assert fragment in msg, msg
    return msg


def _byo(**overrides) -> dict:
    data = {
        "feature_spec": {"income": {"positive": ">50K"}, "age": {"transform": "log1p"}, "workclass": {}},
        "channel_spec": {"label": ["income"], "numerical": ["age"], "categorical": ["workclass"]},
        "source_spec": {"train": [{"type": "parquet", "features": ["income", "age", "workclass"],
                                   "files": ["adult.parquet"]}]},
    }
    data.update(overrides)
    return data


def test_bring_your_own_input_spec_is_valid():
    spec = fs.from_dict(_byo())
    assert not spec.is_dataset
    assert spec.feature_spec["income"].positive == ">50K"


@pytest.mark.parametrize("mutate, fragments", [
    (lambda d: d["feature_spec"]["workclass"].update(hash_buckets=1), ["feature_spec.workclass", "hash_buckets"]),
    (lambda d: d["feature_spec"]["workclass"].update(hash_buckets="many"), ["feature_spec.workclass", "hash_buckets"]),
    (lambda d: d["feature_spec"]["age"].update(hash_buckets=10), ["feature_spec.age", "categorical"]),
    (lambda d: d["feature_spec"]["workclass"].update(transform="log1p"), ["feature_spec.workclass", "numerical"]),
    (lambda d: d["feature_spec"]["age"].update(transform="sqrt"), ["feature_spec.age", "transform"]),
    (lambda d: d["feature_spec"]["workclass"].update(frequency_threshold=-1), ["feature_spec.workclass"]),
    (lambda d: d["feature_spec"]["income"].update(positive_if="about 4"), ["feature_spec.income", "positive_if"]),
    (lambda d: d["channel_spec"].update(categorical=["workclass", "occupation"]), ["channel_spec.occupation"]),
    (lambda d: d["channel_spec"].update(categorical=["workclass", "age"]), ["channel_spec.age", "both"]),
    (lambda d: d["channel_spec"].update(label=[]), ["channel_spec.label"]),
    (lambda d: d["channel_spec"].update(dense=["age"]), ["channel_spec.dense"]),
    (lambda d: d["source_spec"]["train"][0].update(files=["../../etc/passwd"]), ["source_spec.train", "escapes"]),
    (lambda d: d["source_spec"]["train"][0].update(files=["/data/adult.parquet"]), ["source_spec.train", "absolute"]),
    (lambda d: d["source_spec"]["train"][0].update(type="xlsx"), ["source_spec.train", "xlsx"]),
    (lambda d: d["source_spec"]["train"][0].update(features=["income", "agee"]), ["source_spec.train", "agee"]),
    (lambda d: d["feature_spec"]["age"].update(hotness=3), ["feature_spec.age", "categorical"]),
    (lambda d: d["feature_spec"]["workclass"].update(hotness=0), ["feature_spec.workclass", "hotness"]),
    (lambda d: d["feature_spec"]["workclass"].update(hotness=2, max_hotness=4), ["feature_spec.workclass",
                                                                                 "max_hotness"]),
    (lambda d: d["feature_spec"]["workclass"].update(pooling="max"), ["feature_spec.workclass", "pooling"]),
    (lambda d: d["feature_spec"]["workclass"].update(sep=""), ["feature_spec.workclass", "sep"]),
])
def test_bad_input_specs_name_section_feature_and_fix(mutate, fragments):
    data = _byo()
    mutate(data)
    _expect(data, *fragments)


@pytest.mark.parametrize("mutate, fragments", [
    (lambda d: d["feature_spec"]["label"].update(dtype="int8"), ["feature_spec.label", "bool"]),
    (lambda d: d["feature_spec"]["num_0"].update(dtype="float64"), ["feature_spec.num_0"]),
    (lambda d: d["feature_spec"]["cat_1.bin"].update(cardinality=None), ["feature_spec.cat_1.bin", "cardinality"]),
    (lambda d: d["feature_spec"]["cat_1.bin"].update(dtype="uint8"), ["feature_spec.cat_1.bin", "dtype"]),
    (lambda d: d["source_spec"]["train"].pop(), ["source_spec.train", "cat_2.bin"]),
    (lambda d: d["source_spec"]["train"][2].update(features=["cat_0.bin", "cat_1.bin"]), ["source_spec.train"]),
    (lambda d: d["source_spec"]["train"][0].update(features=["num_1", "num_0"]), ["source_spec.train", "order"]),
    (lambda d: d["source_spec"]["train"][1].update(files=["a.bin", "b.bin"]), ["source_spec.train", "1 file"]),
    (lambda d: d["feature_spec"]["cat_1.bin"].update(hotness="variable"), ["source_spec.test", "offsets"]),
])
def test_bad_output_specs_name_section_feature_and_fix(mutate, fragments):
    data = _nvidia()
    mutate(data)
    _expect(data, *fragments)


def test_list_features_fixed_and_variable_hotness(tmp_path):
    data = _byo()
    data["feature_spec"]["genres"] = {"hotness": "variable", "sep": "|", "pooling": "mean"}
    data["feature_spec"]["tags"] = {"max_hotness": 5}
    data["feature_spec"]["slots"] = {"hotness": 3}
    data["channel_spec"]["categorical"] += ["genres", "tags", "slots"]
    spec = fs.from_dict(data)
    genres, tags, slots, one = (spec.feature_spec[n] for n in ("genres", "tags", "slots", "workclass"))
    assert (genres.variable_length, genres.values_per_row, genres.multi_valued) == (True, None, True)
    assert (tags.variable_length, tags.values_per_row) == (True, None)
    assert (slots.variable_length, slots.values_per_row, slots.multi_valued) == (False, 3, True)
    assert (one.variable_length, one.values_per_row, one.multi_valued) == (False, 1, False)
    assert fs.offsets_file_name("genres") == "cat_genres.offsets.bin"
    # a dataset: the variable-length feature's chunk lists its values file, then its offsets file
    out = _nvidia()
    out["feature_spec"]["cat_1.bin"]["hotness"] = "variable"
    for split in out["source_spec"]:
        out["source_spec"][split][3]["files"].append(f"{split}/cat_1.offsets.bin")
    out["feature_spec"]["cat_2.bin"]["hotness"] = 4
    spec = fs.from_dict(out)
    assert spec.offsets_file_of("train", "cat_1.bin") == "train/cat_1.offsets.bin"
    assert spec.offsets_file_of("train", "cat_2.bin") is None
    assert fs.load(fs.save(spec, str(tmp_path / "ds"))) == spec


def test_missing_section_and_bad_yaml_and_missing_file(tmp_path):
    _expect({"feature_spec": {}}, "channel_spec", "missing")
    bad = tmp_path / "bad.yaml"
    bad.write_text("feature_spec:\n  a: {dtype: int\nchannel_spec: {}\n")
    with pytest.raises(fs.SpecError, match=r"bad.yaml: is not valid YAML at line \d+"):
        fs.load(str(bad))
    with pytest.raises(fs.SpecError, match="does not exist"):
        fs.load(str(tmp_path / "nowhere"))


def test_yaml_is_loaded_safely(tmp_path):
    evil = tmp_path / "evil.yaml"
    evil.write_text("feature_spec: !!python/object/apply:os.system ['echo pwned']\nchannel_spec: {}\n")
    with pytest.raises(fs.SpecError, match="not valid YAML"):
        fs.load(str(evil))
