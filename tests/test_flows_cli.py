"""`dlrmflow run` and `dlrmflow serve` refuse bad settings with one clear line, before any work starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _dlrmflow(*args: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_", "DLRMFLOW_"))}
    return subprocess.run([sys.executable, "-m", "flows", *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**base, "PREFECT_HOME": str(tmp_path / "prefect"),
                                             "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", **env})  # busy


@pytest.mark.parametrize("args, env, message", [
    (["run", "--store", "gs://bucket/x"], {}, "unsupported scheme 'gs'"),
    (["run", "--store", "s3://bucket/x"], {"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                                           "AWS_CONFIG_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true"},
     "no AWS credentials"),
    (["run", "--set", "train.model.no_such_field=1"], {}, "train.model.no_such_field: Extra inputs are not permitted"),
    (["run", "--synthetic.rows", "10"], {}, "synthetic.rows: Input should be greater than or equal to 1000"),
    (["run", "--preset", "nope"], {}, "preset: Input should be 'default', 'criteo-sample' or 'synthetic'"),
    (["serve"], {}, "serve needs a Prefect server"),
    (["serve", "--cron", "every night"], {"PREFECT_API_URL": "http://127.0.0.1:9/api"}, "is not a cron expression"),
])
def test_bad_settings_fail_before_work(args, env, message, tmp_path):
    r = _dlrmflow(*args, tmp_path=tmp_path, **env)
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr and "Traceback" not in r.stderr
    assert "temporary server" not in r.stderr + r.stdout and not (tmp_path / "artifacts" / "synthetic").exists()


def _run_config(*argv: str):
    import argparse

    from flows.commands import run

    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    return run.build_config(parser.parse_args(argv))


def test_run_takes_the_presets_preprocessing_unless_given(capsys):
    """`dlrmflow run --input <10k rows> --preset criteo-sample` preprocesses as the preset was tuned; what the
    user gives wins, and files mapped to splits keep their splits (the preset's split rule is not applied)."""
    config = _run_config("--input", "rows.tsv.gz", "--preset", "criteo-sample")
    assert (config.preprocess.split, config.preprocess.frequency_threshold) == ("ordered:train=0.7,val=0.1,test=0.2", 12)
    assert config.train.early_stopping_patience == 6  # the criteo-sample training preset
    config = _run_config("--input", "rows.tsv.gz", "--preset", "criteo-sample", "--frequency-threshold", "3")
    assert config.preprocess.frequency_threshold == 3
    capsys.readouterr()
    config = _run_config("--input", "train=a.tsv", "--input", "test=b.tsv", "--preset", "criteo-sample")
    assert config.preprocess.split is None and config.preprocess.frequency_threshold == 12
    assert config.preprocess.inputs == ["train=a.tsv", "test=b.tsv"]
    said = capsys.readouterr().err
    assert "preprocess.frequency_threshold = 12" in said and "preprocess.split not applied" in said


def test_every_config_field_is_a_command_line_option():
    """Each stage model's fields are reachable from its subcommand (generated from the models)."""
    from flows.cli import build_parser
    from flows.config import PipelineConfig, ServeConfig
    from flows.options import _unwrap_optional, collect
    from preprocessing.config import PreprocessConfig
    from synthetic.generator import SynthConfig
    from training.config import EvaluateConfig, TrainConfig
    from training.launchers import LaunchConfig

    def leaves(model, prefix=""):
        for name, field in model.model_fields.items():
            annotation = _unwrap_optional(field.annotation)[0]   # an optional section (init_from) too
            sub = getattr(annotation, "model_fields", None)
            if sub is not None and name not in ("launcher",):
                yield from leaves(annotation, prefix + name + ".")
            elif name != "launcher":
                yield prefix + name

    def subparser(cmd):
        return build_parser(only=cmd)._subparsers._group_actions[0].choices[cmd]

    sub = {cmd: subparser(cmd) for cmd in ("train", "preprocess", "run", "evaluate", "synth", "serve")}
    dests = {cmd: {a.dest for a in p._actions} for cmd, p in sub.items()}
    assert {f"@train:{f}" for f in leaves(TrainConfig)} <= dests["train"]
    assert {f"@launch:{f}" for f in leaves(LaunchConfig)} <= dests["train"]
    assert {"@launch:launcher.kind", "@launch:launcher.partition", "@launch:launcher.image",
            "@launch:launcher.nnodes"} <= dests["train"]
    assert {f"@config:{f}" for f in leaves(PreprocessConfig)} <= dests["preprocess"]
    assert {f"@evaluate:{f}" for f in leaves(EvaluateConfig)} <= dests["evaluate"]
    assert {f"@config:{f}" for f in leaves(SynthConfig)} <= dests["synth"]
    filled_in = {"train.dataset", "preprocess.out", "preprocess.progress"}
    served = {"pipeline." + f for f in filled_in | {"store", "window.timezone"}}  # serve's own store and time zone
    assert {f"@config:{f}" for f in leaves(ServeConfig)} - {f"@config:{f}" for f in served} <= dests["serve"]
    assert {f"@pipeline:{f}" for f in leaves(PipelineConfig)} - {f"@pipeline:{f}" for f in filled_in} <= dests["run"]
    args = sub["train"].parse_args(["--run", "r", "--optimizer.dense.lr", "0.3", "--launcher", "slurm",
                                     "--launcher.nodes", "4", "--data.no-shuffle", "--model.bottom-mlp", "32", "16"])
    assert collect(args, "train") == {"optimizer.dense.lr": 0.3, "data.shuffle": False, "model.bottom_mlp": [32, 16]}
    assert collect(args, "launch") == {"launcher.kind": "slurm", "launcher.nodes": 4}


@pytest.mark.parametrize("flag, value, yaml_text", [
    ("--optimizer.dense.lr", "-1", "optimizer: {dense: {lr: -1}}"),
    ("--model.interaction", "attention", "model: {interaction: attention}"),
    ("--epochs", "two", "epochs: two"),
])
def test_a_bad_value_gets_the_same_message_on_the_command_line_as_in_yaml(flag, value, yaml_text, tmp_path):
    from common.errors import UserError
    from training.config import TrainConfig

    (tmp_path / "bad.yaml").write_text(yaml_text)
    with pytest.raises(UserError) as from_yaml:
        TrainConfig.from_yaml(str(tmp_path / "bad.yaml"))
    r = _dlrmflow("train", "--run", str(tmp_path / "r"), "--dataset", "d", flag, value, tmp_path=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(from_yaml.value).split(": ", 1)[1] in r.stderr, (str(from_yaml.value), r.stderr)
    assert r.stderr.startswith("error: command line: ")


def test_a_user_error_inside_the_pipeline_prints_one_clean_line(tmp_path):
    """Inside the running flows (Prefect started): the message alone; `--debug` adds the traceback."""
    missing = str(tmp_path / "no-such-day.tsv")
    r = _dlrmflow("run", "--input", missing, "--store", str(tmp_path / "store"), tmp_path=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("does not exist") >= 1 and f"error: input '{missing}' does not exist" in r.stderr
    r = _dlrmflow("--debug", "run", "--input", missing, "--store", str(tmp_path / "store"), tmp_path=tmp_path)
    assert r.returncode == 2 and "Traceback" in r.stderr


@pytest.mark.parametrize("flag, value, valid", [
    ("--eval-split", "validation", "train, val, test"),
    ("--data.train-split", "training", "train, val, test"),
    ("--evaluate.split", "testing", "train, test"),
])
def test_a_split_name_the_preprocessing_will_not_write_fails_before_any_work(flag, value, valid, tmp_path):
    """The split names come from the split rule (or the inputs mapped to splits) before anything is read."""
    split = ["--split", "ordered:train=0.9,test=0.1"] if valid == "train, test" else []
    r = _dlrmflow("run", flag, value, *split, "--store", str(tmp_path / "store"), tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"the dataset has no split '{value}' (it has: {valid})" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "store" / "synthetic").exists() and not (tmp_path / "store" / "datasets").exists()


def test_the_forms_preset_applies_to_the_fields_left_at_their_defaults():
    """The pipeline flow applies `preset` as `dlrmflow run --preset` does (PipelineConfig.with_preset), a form's
    changed fields counting as given; the result has no preset left, so applying it again changes nothing."""
    from flows.config import PipelineConfig

    form = PipelineConfig(preset="criteo-sample", preprocess={"frequency_threshold": 3}, train={"epochs": 2})
    config, notes = form.with_preset()
    assert (config.preprocess.split, config.preprocess.frequency_threshold) == ("ordered:train=0.7,val=0.1,test=0.2", 3)
    assert (config.train.early_stopping_patience, config.train.epochs) == (6, 2)
    assert config.preset is None and config.with_preset() == (config, [])
    assert "preset criteo-sample: preprocess.frequency_threshold not applied (given: 3)" in notes
