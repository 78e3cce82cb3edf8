"""A YAML alias bomb (~400 bytes standing for 10^9 values) is refused by every reader of the project in
milliseconds, with one line naming the file and the fix; ordinary YAML (a glob's '*', the few aliases of NVIDIA's
own specs) still reads."""

from __future__ import annotations

import time

import pytest
import yaml

from common import config as yaml_reader
from common.config import load_yaml
from common.errors import UserError

LEVELS = "abcdefghi"   # 9 levels of 10 aliases each: 10^9 leaves


def bomb() -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in zip(LEVELS, LEVELS[1:]):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]")
    return "\n".join(lines) + "\n"


def refused(call, path) -> str:
    """The one-line message of ``call``'s UserError, checked to come in under a second and name ``path``."""
    start = time.perf_counter()
    with pytest.raises(UserError) as e:
        call()
    took = time.perf_counter() - start
    message = str(e.value)
    assert took < 1.0, took
    assert "\n" not in message and str(path) in message, message
    assert "line 2, column 8: YAML alias *a: the aliases repeat 1,234,567,880 values" in message, message
    assert "Fix:" in message
    return message


def test_a_spec_with_an_alias_bomb_is_refused(tmp_path):
    from feature_spec import load

    spec = tmp_path / "spec.yaml"
    spec.write_text(bomb())
    refused(lambda: load(str(spec)), spec)


def test_a_config_file_with_an_alias_bomb_is_refused(tmp_path, capsys):
    from flows.cli import main
    from training import TrainConfig
    from tuning.config import SearchSpace

    config = tmp_path / "train.yaml"
    config.write_text(bomb())
    refused(lambda: TrainConfig.from_yaml(str(config)), config)
    refused(lambda: SearchSpace.from_yaml(str(config)), config)
    # the command line says the same in one line (its own imports take a few seconds on a busy machine; the bomb,
    # read, took minutes)
    for argv in (["plan", "--cardinalities", "10", "--world-size", "1", "--config", str(config)],   # a training's
                 ["render", "--run", str(tmp_path / "runs" / "r"), "--config", str(config)]):   # a launcher's
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{config}: line 2, column 8: YAML alias *a" in err, err


def test_a_tuned_config_with_an_alias_bomb_is_refused(tmp_path):
    from models import TUNED_FILE, model_uri
    from nightly.config import PipelineConfig

    store = str(tmp_path / "store")
    folder = tmp_path / "store" / "models" / "m"
    folder.mkdir(parents=True)
    (folder / TUNED_FILE).write_text(bomb())
    pipeline = PipelineConfig(store=store, model="m", tuned_config="model")
    refused(pipeline.tuned_train, f"{model_uri(store, 'm')}/{TUNED_FILE}")


def test_the_pure_python_loader_bounds_aliases_too():
    pure = type("PureBounded", (yaml_reader._BoundAliases, yaml.SafeLoader), {})
    with pytest.raises(yaml_reader._Aliased):
        yaml.load(bomb(), Loader=pure)
    assert yaml.load("a: &a [1]\nb: *a\n", Loader=pure) == {"a": [1], "b": [1]}


def test_ordinary_yaml_and_a_few_aliases_still_read():
    assert load_yaml('inputs: ["data/*.tsv", "x*"]\nlr: &lr 0.1\n') == {"inputs": ["data/*.tsv", "x*"], "lr": 0.1}
    assert yaml_reader.load_yaml_all("a: 1\n---\nb: [2, '*']\n") == [{"a": 1}, {"b": [2, "*"]}]
    # NVIDIA's tools write specs whose channels and chunks share a list: an anchor and its aliases
    nvidia = "channel_spec:\n  numerical: &id001 [num_0, num_1]\nsource_spec:\n  train:\n  - {features: *id001}\n"
    assert load_yaml(nvidia)["source_spec"]["train"][0]["features"] == ["num_0", "num_1"]
    # aliases repeating up to ALIAS_VALUES (100,000) values read: 99,099 here; 101,101 below
    wide = "a: &a [" + ", ".join(["1"] * 1000) + "]\nb: [" + ", ".join(["*a"] * 99) + "]\n"
    assert len(load_yaml(wide)["b"]) == 99
    with pytest.raises(UserError, match=r"manifest.yaml: line 4, column 5: YAML alias \*a: the aliases repeat "
                                         r"101,101 values"):
        yaml_reader.load_yaml_all("x: 1\n---\n" + wide + "c: [*a, *a]\n", "manifest.yaml")
    with pytest.raises(UserError, match=r"f.yaml: line 1, column 11: YAML alias \*a: an alias inside its own anchor"):
        load_yaml("a: &a {b: *a}\n", "f.yaml")
