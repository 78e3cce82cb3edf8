"""The same preprocessing against a real S3 HTTP endpoint on loopback (moto's server) through s3fs."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from helpers.processes import run_dlrmflow
from preprocessing import PreprocessConfig, run
from preprocessing.writer import VERIFIED

def test_s3_inputs_and_store_match_local(criteo_10k, tmp_path, s3_server):
    s3, env = s3_server, dict(os.environ)   # the fixture's AWS_* variables
    s3.create_bucket(Bucket="logs")
    with gzip.open(criteo_10k, "rb") as f:
        lines = f.readlines()
    local = tmp_path / "in"
    local.mkdir()
    for i, part in enumerate((lines[:4000], lines[4000:])):
        body = gzip.compress(b"".join(part), mtime=0)
        (local / f"day{i}.gz").write_bytes(body)
        s3.put_object(Bucket="logs", Key=f"raw/day{i}.gz", Body=body)

    cmd = ["preprocess", "--input", "s3://logs/raw/", "--out", "s3://logs/store", "--frequency-threshold", "2",
           "--no-progress"]
    r = run_dlrmflow(*cmd, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    dataset = r.stdout.strip().splitlines()[-1]
    assert dataset.startswith("s3://logs/store/datasets/criteo-")
    again = run_dlrmflow(*cmd, env=env, timeout=120)
    assert "already complete, skipping preprocessing" in again.stderr
    assert f"verifying dataset {dataset} against its recorded checksums" in again.stderr   # the reuse reads it once

    ref = Path(run(PreprocessConfig(inputs=[str(local)], out=str(tmp_path / "ref"), frequency_threshold=2,
                                    progress=False)))
    prefix = dataset.removeprefix("s3://logs/") + "/"
    keys = {o["Key"][len(prefix):] for o in s3.list_objects_v2(Bucket="logs", Prefix=prefix)["Contents"]}
    local_files = {str(p.relative_to(ref)) for p in ref.rglob("*") if p.is_file()}
    assert keys == local_files | {VERIFIED}   # the second run's record of the verification
    for rel in local_files - {"feature_spec.yaml"}:
        assert s3.get_object(Bucket="logs", Key=prefix + rel)["Body"].read() == (ref / rel).read_bytes(), rel

    missing = run_dlrmflow(*cmd[:2], "s3://logs/nope/x.gz", *cmd[3:], env=env, timeout=120)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
