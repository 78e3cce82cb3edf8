"""`dlrmflow run`, `serve` and `train` refuse bad settings with one clear line, before any work starts (in this
interpreter, `flows.cli.main`; one smoke test per command as a fresh `dlrmflow` process)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys

import pytest


def _dlrmflow(*args: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_", "DLRMFLOW_"))}
    return subprocess.run([sys.executable, "-m", "flows", *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**base, "PREFECT_HOME": str(tmp_path / "prefect"),
                                             "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", **env})  # busy


def _main(*args: str, capsys) -> tuple[int, str]:
    """`dlrmflow ARGS` in this interpreter (flows.cli.main): (exit code, what it wrote to stderr)."""
    from flows.cli import main

    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args, env, message", [
    (["run", "--store", "gs://bucket/x"], {}, "unsupported scheme 'gs'"),
    (["run", "--store", "s3://bucket/x"], {"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                                           "AWS_CONFIG_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true"},
     "no AWS credentials"),
    (["run", "--set", "train.arch.no_such_field=1"], {}, "train.arch.no_such_field: Extra inputs are not permitted"),
    (["run", "--synthetic.rows", "10"], {}, "synthetic.rows: Input should be greater than or equal to 1000"),
    (["run", "--preset", "nope"], {}, "preset: Input should be 'criteo-sample', 'default' or 'synthetic'"),
    (["run", "--run-name", "../models/prod"], {}, "run_name: Value error, run name '../models/prod' cannot name a "
     "folder in the store's runs/ folder. Fix: use letters, digits, '_', '.' or '-' (no '/')"),
    (["run", "--run-name", "/other-bucket/x"], {}, "run name '/other-bucket/x' cannot name a folder"),
    (["run", "--run-name", "nightly-{date}/.."], {}, "run name 'nightly-{date}/..' cannot name a folder"),
    (["run", "--model", "../ctr"], {}, "model: String should match pattern"),
    (["run", "--launcher", "slurm", "--nproc", "4"], {}, "nproc is the local launcher's ranks; a cluster job has "
     "nodes x nproc_per_node"),
    (["serve"], {}, "serve needs a Prefect server"),
    (["serve", "--cron", "every night"], {"PREFECT_API_URL": "http://127.0.0.1:9/api"}, "is not a cron expression"),
])
def test_bad_settings_fail_before_work(args, env, message, tmp_path, monkeypatch, capsys):
    """In-process (`flows.cli.main`): exit 2 and the one line, before Prefect or the store is touched."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.cli import main

    for key in [k for k in os.environ if k.startswith(("AWS_", "DLRMFLOW_"))]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key != "PREFECT_API_URL":
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    api = {PREFECT_API_URL: env["PREFECT_API_URL"]} if "PREFECT_API_URL" in env else {}
    with temporary_settings(updates=api, restore_defaults=set() if api else {PREFECT_API_URL}):
        assert main(args) == 2
    out = capsys.readouterr()
    assert message in out.err and "Traceback" not in out.err
    assert "temporary server" not in out.err + out.out and not (tmp_path / "artifacts" / "synthetic").exists()


@pytest.mark.slow
@pytest.mark.parametrize("args, env, message", [
    (["run", "--run-name", "../models/prod"], {}, "run_name: Value error, run name '../models/prod' cannot name a "
     "folder in the store's runs/ folder. Fix: use letters, digits, '_', '.' or '-' (no '/')"),
    (["serve"], {}, "serve needs a Prefect server"),
])
def test_the_command_line_fails_before_work_with_one_line(args, env, message, tmp_path):
    """The smoke test of `dlrmflow run` and `dlrmflow serve` as commands (a fresh interpreter, no Prefect
    variables): exit 2 and one line, no traceback, no temporary server (every other bad setting:
    test_bad_settings_fail_before_work, in this process)."""
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
    assert config.train.early_stopping_patience == 6  # the criteo-sample preset's training settings
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
    from nightly.config import PipelineConfig
    from flows.config import ServeConfig
    from flows.options import _unwrap_optional, collect
    from preprocessing.config import PreprocessConfig
    from synthetic.generator import SynthConfig
    from training.config import EvaluateConfig, TrainConfig
    from training.launchers import RanksConfig

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

    sub = {cmd: subparser(cmd) for cmd in ("train", "preprocess", "run", "evaluate", "score", "synth", "serve")}
    dests = {cmd: {a.dest for a in p._actions} for cmd, p in sub.items()}
    assert {f"@train:{f}" for f in leaves(TrainConfig)} <= dests["train"]
    for cmd in ("train", "evaluate", "score"):   # every rank job takes the same launcher options
        assert {f"@launch:{f}" for f in leaves(RanksConfig)} <= dests[cmd]
        assert {"@launch:launcher.kind", "@launch:launcher.nproc", "@launch:launcher.partition",
                "@launch:launcher.image", "@launch:launcher.nnodes"} <= dests[cmd]
    assert {f"@config:{f}" for f in leaves(PreprocessConfig)} <= dests["preprocess"]
    assert {f"@evaluate:{f}" for f in leaves(EvaluateConfig)} <= dests["evaluate"]
    assert {f"@config:{f}" for f in leaves(SynthConfig)} <= dests["synth"]
    filled_in = {"train.dataset", "preprocess.out", "preprocess.progress", "gc.store", "gc.inputs", "gc.retain_days"}
    served = {"pipeline." + f for f in filled_in | {"store", "window.timezone"}}  # serve's own store and time zone
    assert {f"@config:{f}" for f in leaves(ServeConfig)} - {f"@config:{f}" for f in served} <= dests["serve"]
    assert {f"@pipeline:{f}" for f in leaves(PipelineConfig)} - {f"@pipeline:{f}" for f in filled_in} <= dests["run"]
    args = sub["train"].parse_args(["--run", "r", "--optimizer.dense.lr", "0.3", "--launcher", "slurm",
                                     "--launcher.nodes", "4", "--data.no-shuffle", "--arch.bottom-mlp", "32", "16"])
    assert collect(args, "train") == {"optimizer.dense.lr": 0.3, "data.shuffle": False, "arch.bottom_mlp": [32, 16]}
    assert collect(args, "launch") == {"launcher.kind": "slurm", "launcher.nodes": 4}
    for cmd, root in (("train", "launch"), ("evaluate", "launch"), ("score", "launch"), ("run", "pipeline"),
                      ("serve", "config")):   # --nproc: the everyday name of the local launcher's ranks
        path = "pipeline.launcher.nproc" if cmd == "serve" else "launcher.nproc"
        required = {"train": ["--run", "r"], "evaluate": ["--run", "r"], "score": ["--input", "x", "--out", "o"]}
        assert collect(sub[cmd].parse_args([*required.get(cmd, []), "--nproc", "4"]), root) == {path: 4}


def _help(capsys, *argv: str) -> str:
    from flows.cli import main

    with pytest.raises(SystemExit) as end:
        main(list(argv))
    assert end.value.code == 0
    return capsys.readouterr().out


def _listed(help_text: str) -> list[str]:
    """The options a help text lists (the first name of each; -h left out)."""
    return re.findall(r"^  (--[\w.-]+)", help_text, re.M)


@pytest.mark.parametrize("command", ["run", "serve", "train", "evaluate", "score", "plan", "render"])
def test_help_lists_the_everyday_options_and_help_all_every_option(command, capsys):
    """`--help` lists the command's EVERYDAY options (about 15) and ends saying `--help-all` shows all N."""
    everyday = importlib.import_module(f"flows.commands.{command}").EVERYDAY
    short, full = _help(capsys, command, "--help"), _help(capsys, command, "--help-all")
    total = len(_listed(full))
    assert sorted(_listed(short)) == sorted([*everyday, "--help-all"])  # each EVERYDAY name is an option
    assert len(everyday) <= 15 and total > 2 * len(everyday)
    assert short.rstrip().splitlines()[-1] == f"--help-all shows all {total} options."
    assert "--help-all shows" not in full and set(_listed(short)) - {"--help-all"} < set(_listed(full))
    if command == "run":
        assert total == 166   # --tuned-config and both optimizers' --*.weight-decay (issue 22); the promotion
        # gates, --notify-block, --catchup, --gc.*, the data gate (issue 19 §5-8),
        # --train.init-from.store (issue 20 §3); --nproc is --launcher.nproc (the local launcher's, for all three
        # stages), --evaluate.nproc gone (issue 20 §2); --launcher.gpu-vendor (issue 32 §1);
        # --data.holdout-fraction and --data.holdout-rows (issue 32 §6); issue 41: --promote.max-ne,
        # --promote.logloss-tolerance, --promote.warm-start-days, --calibrate, --lookback-days, --skip-missing,
        # --evaluate.slice-by/-slice-top/-gauc-by, --promote.slice-max-loss/-slice-min-share/-watch-*; issue 46:
        # --data-check.reference-days/-min-reference-days/-long-*/-shift-days/-on-shift/-max-duplicates-increase;
        # issue 45: --launcher.start-method
        assert {"--promote.margin", "--promote.min-auc-lift", "--promote.min-test-rows", "--promote.confidence",
                "--promote.calibration-band", "--night.notify-block", "--night.catchup", "--night.on-data-check",
                "--data-check.max-psi", "--data-check.rows-band"} <= set(_listed(full))
        # the once-flat settings' old flags are gone (only persisted state keeps their names: RENAMED)
        assert not {"--promote-margin", "--min-auc-lift", "--catchup", "--on-data-check"} & set(_listed(full))


def test_a_hidden_option_still_parses_and_takes_effect(capsys):
    from flows.cli import build_parser
    from flows.commands import run

    hidden = ["--optimizer.dense.eps", "1e-6", "--evaluate.split", "val", "--synthetic.rows", "5000"]
    assert not set(hidden[::2]) & set(_listed(_help(capsys, "run", "--help")))
    config = run.build_config(build_parser(only="run").parse_args(["run", *hidden]))
    assert (config.train.optimizer.dense.eps, config.evaluate.split, config.synthetic.rows) == (1e-6, "val", 5000)


@pytest.mark.parametrize("flag, value, yaml_text", [
    ("--optimizer.dense.lr", "-1", "optimizer: {dense: {lr: -1}}"),
    ("--arch.interaction", "attention", "arch: {interaction: attention}"),
    ("--epochs", "two", "epochs: two"),
])
def test_a_bad_value_gets_the_same_message_on_the_command_line_as_in_yaml(flag, value, yaml_text, tmp_path, capsys):
    from common.errors import UserError
    from training.config import TrainConfig

    (tmp_path / "bad.yaml").write_text(yaml_text)
    with pytest.raises(UserError) as from_yaml:
        TrainConfig.from_yaml(str(tmp_path / "bad.yaml"))
    code, err = _main("train", "--run", str(tmp_path / "r"), "--dataset", "d", flag, value, capsys=capsys)
    assert code == 2 and "Traceback" not in err
    assert str(from_yaml.value).split(": ", 1)[1] in err, (str(from_yaml.value), err)
    assert err.startswith("error: command line: ")


@pytest.mark.slow
def test_a_user_error_inside_the_pipeline_prints_one_clean_line(prefect_harness, tmp_path, capsys):
    """Inside the running flows (Prefect started: the session's test API): the message alone; `--debug` adds the
    traceback. (`run` as a fresh process, which starts its own Prefect, is the smoke test above.)"""
    missing = str(tmp_path / "no-such-day.tsv")
    code, err = _main("run", "--input", missing, "--store", str(tmp_path / "store"), capsys=capsys)
    assert code == 2 and "Traceback" not in err
    assert err.count("does not exist") >= 1 and f"error: input '{missing}' does not exist" in err
    code, err = _main("--debug", "run", "--input", missing, "--store", str(tmp_path / "store"), capsys=capsys)
    assert code == 2 and "Traceback" in err


@pytest.mark.parametrize("flag, value, valid", [
    ("--eval-split", "validation", "train, val, test"),
    ("--data.train-split", "training", "train, val, test"),
    ("--evaluate.split", "testing", "train, test"),
])
def test_a_split_name_the_preprocessing_will_not_write_fails_before_any_work(flag, value, valid, tmp_path, capsys):
    """The split names come from the split rule (or the inputs mapped to splits) before anything is read."""
    split = ["--split", "ordered:train=0.9,test=0.1"] if valid == "train, test" else []
    code, err = _main("run", flag, value, *split, "--store", str(tmp_path / "store"), capsys=capsys)
    assert code == 2, err[-2000:]
    assert f"the dataset has no split '{value}' (it has: {valid})" in err and "Traceback" not in err
    assert not (tmp_path / "store" / "synthetic").exists() and not (tmp_path / "store" / "datasets").exists()


@pytest.mark.parametrize("args, message", [
    (["--eval-split", "test"], "eval_split 'test' would choose the checkpoint (best, early stopping) on the split that "
                               "reports the run, whose metrics would then not be held out. Fix: leave eval_split at 'val'"),
    (["--evaluate.split", "val"], "train.eval_split 'val' is evaluate.split, the split the run reports: its checkpoint "
                                  "would be chosen (best, early stopping) on the rows that score it. Fix:"),
    (["--split", "ordered:train=0.9,test=0.1", "--evaluate.split", "holdout"],
     "split rule ordered:train=0.9,test=0.1: the dataset has no split 'holdout' (it has: train, test)"),
    # a once-flat setting's old name: the command line takes the new one only (nightly.config.RENAMED)
    (["--set", "promote_margin=0.01"], "--set promote_margin: the setting is promote.margin now. Fix: --set "
                                       "promote.margin=VALUE (or --promote.margin VALUE)."),
])
def test_run_never_reports_the_split_its_checkpoint_is_chosen_on(args, message, tmp_path, capsys):
    """Refused in one line before any work: validating on the split the run reports. Without 'val' (train and test
    only), the run validates on the end of train (checked in test_train_nvidia), which no evaluation can name."""
    code, err = _main("run", *args, "--store", str(tmp_path / "store"), capsys=capsys)
    assert code == 2 and f"error: {message}" in err and "Traceback" not in err, err[-2000:]
    assert not (tmp_path / "store" / "synthetic").exists() and not (tmp_path / "store" / "datasets").exists()


def test_the_forms_preset_applies_to_the_fields_left_at_their_defaults():
    """The pipeline flow applies `preset` as `dlrmflow run --preset` does (PipelineConfig.with_preset), a form's
    changed fields counting as given; the result has no preset left, so applying it again changes nothing."""
    from nightly.config import PipelineConfig

    form = PipelineConfig(preset="criteo-sample", preprocess={"frequency_threshold": 3}, train={"epochs": 2})
    config, notes = form.with_preset()
    assert (config.preprocess.split, config.preprocess.frequency_threshold) == ("ordered:train=0.7,val=0.1,test=0.2", 3)
    assert (config.train.early_stopping_patience, config.train.epochs) == (6, 2)
    assert config.preset is None and config.with_preset() == (config, [])
    assert "preset criteo-sample: preprocess.frequency_threshold not applied (given: 3)" in notes


def test_default_run_names_survive_the_arch_rename():
    """The hash in a run's default name is the one from before `model` became `arch`, so `dlrmflow run` again
    finds (and resumes) the runs made before it."""
    from training.config import config_hash
    from training.config import TrainConfig

    assert config_hash(TrainConfig.preset("default")) == "03c92e09a0"
    # sharding.profile auto (the default after 'cpu'): hashed as 'cpu', the plan is not the model
    assert TrainConfig.preset("default").sharding.profile == "auto"
    explicit = TrainConfig.from_dict({**TrainConfig.preset("default").model_dump(mode="json"),
                                      "sharding": {"profile": "cpu"}})
    assert config_hash(explicit) == "03c92e09a0"
    # init_from.store (added later) unset: a warm-started config keeps the name it had before the field existed
    warm = TrainConfig.from_dict({**TrainConfig.preset("default").model_dump(mode="json"), "init_from": "s3://b/p/runs/r1"})
    assert config_hash(warm) == "71992ea025"
    # data.holdout_fraction (added later) at its default and no holdout resolved: names stay; a resolved holdout
    # (a dataset without 'val') names a new run, never one that validated on 'test' before the holdout existed
    held = TrainConfig.from_dict({**TrainConfig.preset("default").model_dump(mode="json"), "eval_split": "holdout",
                                  "data": {"holdout_rows": 700}})
    assert config_hash(held) != config_hash(TrainConfig.preset("default"))


def test_preprocess_imports_neither_training_nor_nightly_nor_prefect(tmp_path):
    """`dlrmflow preprocess` pays only for the preprocessing's imports (its fixed cost per run)."""
    code = ("import sys; from flows.cli import main; "
            f"main(['preprocess', '--input', {str(tmp_path / 'none.tsv')!r}, '--out', {str(tmp_path)!r}]); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'training', 'nightly', 'prefect', 'torch'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "does not exist" in done.stderr, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


@pytest.mark.parametrize("args, typo, nearest", [
    (["preprocess", "--frequency-treshold", "5"], "--frequency-treshold", "--frequency-threshold"),
    (["preprocess", "--inptu", "x.tsv", "--store", "s"], "--inptu", "--input"),
    (["preprocess", "--inptu", "x.tsv"], "--inptu", "--input"),   # named, not "--inputs is required"
    (["train", "--run", "r", "--epoch", "2"], "--epoch", "--epochs"),   # a prefix is no option (allow_abbrev)
    (["run", "--data.batch-sise=64"], "--data.batch-sise", "--data.batch-size"),
])
def test_a_mistyped_option_names_the_nearest_under_the_commands_usage(args, typo, nearest, capsys):
    """Exit 2 with the subcommand's usage and one line naming the typo and the nearest option; nothing runs."""
    from flows.cli import main

    with pytest.raises(SystemExit) as end:
        main(args)
    err = capsys.readouterr().err
    assert end.value.code == 2 and err.startswith(f"usage: dlrmflow {args[0]} ")
    assert err.rstrip().splitlines()[-1] == (f"dlrmflow {args[0]}: error: unrecognized option {typo}: did you "
                                             f"mean {nearest}?")


def test_a_mistyped_command_or_a_stray_argument_is_named(capsys):
    from flows.cli import main

    with pytest.raises(SystemExit):
        main(["trian", "--run", "r"])
    assert capsys.readouterr().err.rstrip().endswith("did you mean train?")
    with pytest.raises(SystemExit):
        main(["inspect", "d", "extra"])
    err = capsys.readouterr().err
    assert err.startswith("usage: dlrmflow inspect ") and "unrecognized arguments: extra" in err


def test_preprocess_takes_store_as_every_command_does():
    """`--store` is preprocess's `--out` (one option, two names): the same dataset either way."""
    from flows.cli import build_parser
    from flows.options import collect

    parser = build_parser(only="preprocess")
    for flag in ("--store", "--out"):
        assert collect(parser.parse_args(["preprocess", "--input", "x.tsv", flag, "s3://b/p"])) == {
            "inputs": ["x.tsv"], "out": "s3://b/p"}
