"""The train flow picks the launcher from its parameters: local torchrun by default, Slurm or
Kubernetes when asked (here: Slurm, through the fake sbatch/srun of the launcher tests)."""

from __future__ import annotations

import pytest

from flows.config import default_train
from flows.train import TrainingFailed, train
from helpers.fake_cluster import calls
from helpers.datasets import write_dataset
from training.launchers import launcher_config


@pytest.mark.timeout(120)
def test_train_flow_submits_to_slurm_and_fails_with_the_failing_node(prefect_harness, fake_slurm, monkeypatch):
    tmp_path, settings = fake_slurm
    monkeypatch.setenv("FAKE_EXIT_NODE1", "3")  # the second node's torchrun fails
    dataset = str(write_dataset(tmp_path / "dataset", {"train": 64}))
    launcher = launcher_config({"kind": "slurm", **settings})
    config = default_train().model_copy(update={"eval_split": None})  # a train-only dataset

    with pytest.raises(TrainingFailed, match="exit code 3"):
        train(str(tmp_path / "run"), dataset, config, launcher=launcher)

    sbatch, srun = calls(tmp_path)
    assert sbatch[:3] == ["sbatch", "--wait", "--parsable"] and sbatch[3].endswith(".sbatch")
    assert srun[0] == "srun" and "--nodes=2" in srun
    assert (tmp_path / "run" / "config.yaml").exists()  # the ranks read the config from the run folder


def test_pipeline_config_defaults_to_the_local_launcher():
    from flows.config import PipelineConfig

    assert PipelineConfig().launcher.kind == "local" and PipelineConfig().launcher.nproc == 2
    assert PipelineConfig(launcher={"kind": "kubernetes"}).launcher.kind == "kubernetes"
