"""The whole pipeline against a real S3 endpoint (moto's server on loopback) through s3fs: dataset,
checkpoints, metrics and plots land in the bucket, a second run reuses them, no secret is stored."""

from __future__ import annotations

import pytest

from flows import artifacts
from flows.pipeline import pipeline
from helpers.fixtures import S3_ENV
from helpers.prefect_api import latest_artifacts, logs_matching, small_pipeline
from preprocessing.writer import VERIFIED


def _keys(s3) -> list[str]:
    return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="store")
            for o in page.get("Contents", [])]


def _objects(s3) -> dict[str, bytes]:
    return {k: s3.get_object(Bucket="store", Key=k)["Body"].read() for k in _keys(s3)}


def test_pipeline_on_s3(prefect_harness, s3_server):
    config = small_pipeline("s3://store/dlrm")
    out = pipeline(config)
    assert out["dataset"].startswith("s3://store/dlrm/datasets/criteo-")
    assert out["run"].startswith("s3://store/dlrm/runs/criteo-")
    objects = _objects(s3_server)
    dataset = out["dataset"].removeprefix("s3://store/")
    run = out["run"].removeprefix("s3://store/")
    for key in (f"{dataset}/_SUCCESS", f"{dataset}/feature_spec.yaml", f"{dataset}/train/label.bin",
                f"{run}/config.yaml", f"{run}/plan.txt", f"{run}/metrics.jsonl", f"{run}/checkpoints/latest",
                f"{run}/eval/test/metrics.json", f"{run}/eval/test/roc.png", f"{run}/eval/test/calibration.png"):
        assert key in objects, key
    assert any(k.startswith(f"{run}/checkpoints/") and k.endswith("/_COMPLETE") for k in objects)
    assert objects[f"{run}/eval/test/roc.png"].startswith(b"\x89PNG")
    assert not [k for k in objects if ".tmp" in k or "dlrmflow-check" in k]

    secret = S3_ENV["AWS_SECRET_ACCESS_KEY"].encode()
    assert not [k for k, body in objects.items() if secret in body]
    arts = latest_artifacts()
    assert not [k for k, data in arts.items() if secret.decode() in str(data)]

    endpoint = s3_server.meta.endpoint_url
    assert arts["evaluation-location"] == (f"Evaluation folder: `{out['run']}/eval/test` "
                                           f"([open]({endpoint}/store?prefix={run}/eval/test/))")
    [row] = arts[artifacts.runs_key("s3://store/dlrm")]
    assert row["run"] == out["run"].rsplit("/", 1)[-1] and row["test AUC"] == round(out["metrics"]["auc"], 4)

    again = pipeline(config)
    assert again["run"] == out["run"] and again["metrics"]["auc"] == pytest.approx(out["metrics"]["auc"])
    assert set(_keys(s3_server)) == objects.keys() | {f"{dataset}/{VERIFIED}"}   # the reuse's verification
    assert logs_matching(f"skipping preprocessing: {out['dataset']}")
    assert logs_matching(f"training already complete, skipping: {out['run']}")
    assert not logs_matching(secret.decode())


def test_credentials_from_a_secret_block(prefect_harness, s3_server, monkeypatch):
    import os

    from prefect.blocks.system import Secret

    from common.errors import UserError
    from common.store import Store
    from flows.pipeline import use_credentials_block

    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL")
    Secret(value={k: os.environ[k] for k in keys}).save("dlrmflow-s3-test", overwrite=True)
    Secret(value="just a string").save("dlrmflow-not-json", overwrite=True)
    for k in keys:
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(UserError, match="no AWS credentials"):
        Store("s3://store/dlrm").check()
    with pytest.raises(UserError, match="must be a JSON object"):
        use_credentials_block("dlrmflow-not-json")
    use_credentials_block("dlrmflow-s3-test")
    Store("s3://store/dlrm").check()
