"""The pipeline's launcher: local torchrun by default, Slurm or Kubernetes when asked (the train flow on a real
Slurm cluster, a failing node and a cancelled flow run included: tests/e2e/test_slurm.py)."""

from __future__ import annotations


def test_pipeline_config_defaults_to_the_local_launcher():
    from nightly.config import PipelineConfig

    assert PipelineConfig().launcher.kind == "local" and PipelineConfig().launcher.nproc == 2
    assert PipelineConfig(launcher={"kind": "kubernetes"}).launcher.kind == "kubernetes"
