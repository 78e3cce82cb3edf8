"""`dlrmflow run` and `dlrmflow serve` refuse bad settings with one clear line, before any work starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _dlrmflow(*args: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_", "DLRMFLOW_"))}
    return subprocess.run([sys.executable, "-m", "flows", *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**base, "PREFECT_HOME": str(tmp_path / "prefect"), **env})


@pytest.mark.parametrize("args, env, message", [
    (["run", "--store", "gs://bucket/x"], {}, "unsupported scheme 'gs'"),
    (["run", "--store", "s3://bucket/x"], {"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                                           "AWS_CONFIG_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true"},
     "no AWS credentials"),
    (["run", "--set", "model.no_such_field=1"], {}, "unknown field 'no_such_field'"),
    (["run", "--rows", "10"], {}, "synthetic.rows"),
    (["serve"], {}, "serve needs a Prefect server"),
    (["serve", "--cron", "every night"], {"PREFECT_API_URL": "http://127.0.0.1:9/api"}, "is not a cron expression"),
])
def test_bad_settings_fail_before_work(args, env, message, tmp_path):
    r = _dlrmflow(*args, tmp_path=tmp_path, **env)
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr and "Traceback" not in r.stderr
    assert "temporary server" not in r.stderr + r.stdout and not (tmp_path / "artifacts" / "synthetic").exists()


def test_run_takes_the_presets_preprocessing_unless_given():
    """`dlrmflow run --input <10k rows> --preset criteo-sample` preprocesses as the preset was tuned."""
    import argparse

    from flows.commands import run

    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    config = run.build_config(parser.parse_args(["--input", "rows.tsv.gz", "--preset", "criteo-sample"]))
    assert (config.preprocess.split, config.preprocess.frequency_threshold) == ("ordered:train=0.7,val=0.1,test=0.2", 12)
    config = run.build_config(parser.parse_args(["--input", "rows.tsv.gz", "--preset", "criteo-sample",
                                                 "--frequency-threshold", "3"]))
    assert config.preprocess.frequency_threshold == 3
