"""training.launchers: the config as a flow parameter, the local launcher's call, the rendered Slurm script and
Kubernetes manifests, the torchrun every node runs (its rank tags, the rendezvous host check), and what a real
cluster cannot show here: hostile strings through fake `sbatch`/`srun`/`scontrol` (the rendered script really runs:
srun starts one "node" per allocated node with SLURM_NODEID set; a fake `python` records the torchrun command line
each node would run) and Kubernetes through a fake `kubectl`. The Slurm launcher on a real cluster:
tests/e2e/test_slurm.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pydantic import TypeAdapter, ValidationError

from common.config import validate
from common.errors import UserError
from helpers.datasets import write_dataset
from helpers.fake_cluster import FAKE_PYTHON, calls as read_calls, executable, sbatch_options
from helpers.kube_schema import check_object
from training.config import TrainConfig
from training.launchers import (KubernetesLauncher, KubernetesLauncherConfig, LauncherConfig, LocalLauncher,
                                LocalLauncherConfig, RanksConfig, SlurmLauncher, SlurmLauncherConfig, build_launcher,
                                infra_dir, launcher_config, read_env_file, train_job)
from training.launchers.base import LaunchError, render
from training.launchers.slurm import sbatch_quote
from training.rundir import RunDir

AMD = read_env_file(infra_dir() / "rccl" / "amd-mi3xx.env")



def test_config_is_a_json_flow_parameter_and_builds_each_launcher():
    cfg = launcher_config({"kind": "slurm", "nodes": 4, "partition": "mi300x", "env": {"A": "1"}})
    data = json.loads(cfg.model_dump_json())
    assert launcher_config(data) == cfg and isinstance(cfg, SlurmLauncherConfig)
    schema = TypeAdapter(LauncherConfig).json_schema()  # what Prefect renders as the parameter form
    assert schema["discriminator"]["propertyName"] == "kind"  # the form shows only the chosen kind's fields
    assert sorted(schema["discriminator"]["mapping"]) == ["kubernetes", "local", "slurm"]
    for model in (LocalLauncherConfig, SlurmLauncherConfig, KubernetesLauncherConfig):
        assert all(f.description for n, f in model.model_fields.items() if n != "kind"), model
    assert "partition" not in LocalLauncherConfig.model_fields and "nnodes" not in SlurmLauncherConfig.model_fields
    assert isinstance(build_launcher(None), LocalLauncher)
    assert isinstance(build_launcher(data), SlurmLauncher) and build_launcher(data).settings.nodes == 4
    assert isinstance(build_launcher({"kind": "kubernetes"}), KubernetesLauncher)
    with pytest.raises(ValidationError):
        launcher_config({"kind": "slurm", "nodez": 2})


def test_local_launcher_checks_the_dataset_saves_the_config_and_runs_torchrun(monkeypatch, plain_launches, tmp_path):
    calls = []
    monkeypatch.setattr("training.launchers.local.run_command", lambda *a, **k: calls.append((a, k)) or 7)
    cfg = TrainConfig(dataset=str(write_dataset(tmp_path / "ds", {"train": 64, "val": 32})))
    launcher = build_launcher({"kind": "local", "nproc": 4, "env": {"X": "2"}, "nnodes": 2, "rdzv_endpoint": "h:1",
                               "node_rank": 1, "rccl_profiles": ["amd-mi3xx"]})
    run = tmp_path / "runs" / "r"
    assert launcher.launch(str(run), cfg, resume=True, env={"PET_TEE": "3"}, on_line=print) == 7
    (args, kw), = calls
    assert args[0][1:] == ["-u", "-m", "training.launchers.torchrun", "--nproc-per-node", "4", "--nnodes", "2",
                           "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--rdzv-id", "r", "--node-rank", "1",
                           "-m", "training.train_worker", str(run), "--resume"]
    assert kw == {"env": {**AMD, "X": "2", "PET_TEE": "3"}, "on_line": print}
    assert TrainConfig.from_yaml(str(run / "config.yaml")) == cfg


@pytest.mark.parametrize("kind", ["local", "slurm", "kubernetes"])
def test_every_launcher_checks_the_dataset_before_anything_starts(kind, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(UserError, match="does not exist|no dataset"):
        build_launcher({"kind": kind, "work_dir": str(tmp_path)} if kind == "slurm" else {"kind": kind}).launch(
            str(run), TrainConfig(dataset=str(tmp_path / "missing")), on_line=print)
    assert not run.exists()  # nothing saved, nothing submitted


@pytest.mark.parametrize("kind", ["local", "slurm", "kubernetes"])
def test_every_launcher_refuses_a_warm_start_from_another_store(kind, tmp_path):
    run = tmp_path / "store" / "runs" / "new"
    ds = str(write_dataset(tmp_path / "store" / "datasets" / "ds", {"train": 64, "val": 32}))
    cfg = TrainConfig.from_dict({"dataset": ds, "init_from": str(tmp_path / "elsewhere" / "runs" / "old")})
    with pytest.raises(UserError, match=r"init_from .*/elsewhere/runs/old lies outside .*/store, the store of the run"):
        build_launcher({"kind": kind, "work_dir": str(tmp_path)} if kind == "slurm" else {"kind": kind}).launch(
            str(run), cfg, on_line=print)
    assert not run.exists()  # nothing saved, nothing submitted


@pytest.mark.parametrize("kind, field, value", [
    ("slurm", "partition", "mi300x\n#SBATCH --uid=0"), ("slurm", "account", "a\rb"), ("slurm", "time_limit", "1:00\x00"),
    ("slurm", "sbatch_options", ["--qos=high\necho injected"]), ("slurm", "setup", ["module load rocm\ttab"]),
    ("slurm", "python", "python\x1b[2J"), ("slurm", "env", {"X": "1\n2"}), ("local", "rccl_profiles", ["a\nb"]),
    ("kubernetes", "image", "img\nother: 1"), ("kubernetes", "node_selector", {"zone": "a\u0085b"}),
])
def test_launcher_settings_refuse_control_characters(kind, field, value):
    with pytest.raises(UserError, match=rf"launcher.yaml: launcher.{kind}.{field}.*control character .* Fix: give it "
                                        "on one line"):
        validate(RanksConfig, {"launcher": {"kind": kind, field: value}}, "launcher.yaml")


@pytest.mark.parametrize("kind, field, value, message", [
    ("slurm", "env", {"A;touch x": "1"}, "not an environment variable name"),
    ("local", "env", {"1A": "1"}, "not an environment variable name"),
    ("kubernetes", "namespace", "dlrmflow --kubeconfig=/tmp/k", "not a Kubernetes namespace"),
    ("kubernetes", "s3_secret", "-secret", "not a Kubernetes object name"),
    ("kubernetes", "memory", "1500 GiB", "not a Kubernetes quantity"),
    ("kubernetes", "extra_resources", {"rdma/hca": "$(eight)"}, "not a Kubernetes quantity"),
])
def test_launcher_settings_refuse_names_and_quantities_that_are_none(kind, field, value, message):
    with pytest.raises(UserError, match=rf"launcher.{kind}.{field}.*{message}"):
        validate(RanksConfig, {"launcher": {"kind": kind, field: value}}, "launcher.yaml")


def hostile(tag: str, marker: Path) -> str:
    """A string that runs ``touch marker`` wherever it is taken for shell (or YAML, or an #SBATCH line) somewhere."""
    return (f"{tag} $(touch {marker}) `touch {marker}` ; touch {marker} ' ; touch {marker} ; ' \" ; touch {marker} "
            f"; \" # {{{{ x }}}} %u %j \\ packjob HetJob & touch {marker} | touch {marker} > {marker}")


@pytest.mark.parametrize("old", [False, True])
def test_sbatch_arguments_read_back_verbatim(old, tmp_path):
    for value in ["--partition=mi300x", "--comment=a b", "--comment=#", "--comment=\\", "--comment='\"'",
                  f"--comment={hostile('c', tmp_path / 'm')}", "--comment=\u00e9\u00a0x"]:
        assert sbatch_options(f"#!/bin/bash\n#SBATCH {sbatch_quote(value)}\n", old=old) == [value], value
    with pytest.raises(LaunchError, match="line break"):
        sbatch_quote("--partition=a\n#SBATCH --uid=0")


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="needs Slurm's sbatch (Debian: slurm-client)")
@pytest.mark.timeout(60)
def test_the_real_sbatch_reads_the_directives_verbatim(tmp_path):
    """Slurm's own sbatch parses the rendered #SBATCH lines (-vv prints the options it read, before it looks for
    a controller: none runs here, and it is stopped right after)."""
    import re

    marker = tmp_path / "INJECTED"
    evil = lambda tag: hostile(tag, marker)
    (tmp_path / "slurm.conf").write_text("ClusterName=t\nSlurmctldHost=localhost\nSlurmctldPort=9\nAuthType=auth/none\n"
                                         "NodeName=n1 CPUs=1\nPartitionName=p1 Nodes=n1\n")
    launcher = build_launcher({"kind": "slurm", "partition": evil("p"), "account": evil("a"),
                               "sbatch_options": [f"--comment={evil('c')}"], "work_dir": str(tmp_path / "w %x #j")})
    run = "s3://bucket/runs/r1"
    script = tmp_path / "job.sbatch"
    script.write_text(launcher.render(train_job(), run))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_"))}
    proc = subprocess.Popen(["sbatch", "-vv", str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**env, "SLURM_CONF": str(tmp_path / "slurm.conf")}, cwd=tmp_path)
    options, lines = {}, []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "end of defined options" in line:
                break
            m = re.match(r"sbatch: (\S+)\s+: (.*)\n?$", line)
            if m:
                options[m.group(1)] = m.group(2)
    finally:
        proc.kill()
        proc.wait()
    assert {k: options.get(k) for k in ("partition", "account", "comment", "output", "job-name")} == {
        "partition": evil("p"), "account": evil("a"), "comment": evil("c"), "output": launcher.output_pattern(train_job(), run),
        "job-name": "dlrmflow-train-r1"}, "".join(lines)
    assert not marker.exists()


@pytest.mark.timeout(60)
def test_slurm_script_keeps_hostile_strings_as_data(fake_slurm):
    """Every setting (but `setup`, which is shell by design) and the run URI are data: the rendered script runs
    (fake sbatch/srun, a fake python at a hostile path), nothing injected runs, and each value arrives verbatim:
    the #SBATCH lines as sbatch parses them, srun's and torchrun's arguments, the ranks' environment."""
    tmp_path, settings = fake_slurm
    marker = tmp_path / "INJECTED"
    evil = lambda tag: hostile(tag, marker)
    odd = tmp_path / "bin $(touch INJECTED) `touch INJECTED`; 'q' \"d\" %j %% #"
    odd.mkdir()
    python = shutil.copy(settings["python"], odd / "python; touch INJECTED")
    profile = shutil.copy(infra_dir() / "rccl" / "amd-mi3xx.env", odd / "rccl $(touch INJECTED).env")
    work_dir = odd / "work"
    settings = {**settings, "partition": evil("p"), "account": evil("a"), "time_limit": evil("t"),
                "sbatch_options": [f"--comment={evil('c')}"], "python": str(python), "work_dir": str(work_dir),
                "container_image": evil("img"), "container_mounts": [evil("m")], "rccl_profiles": [str(profile)],
                "env": {"X": evil("x")}}
    run = odd / f"run {evil('r')[:60].replace('/', '_')}"
    lines: list[str] = []
    ds = str(write_dataset(tmp_path / "ds", {"train": 64, "val": 32}))
    code = build_launcher({"kind": "slurm", **settings}).launch(str(run), TrainConfig(dataset=ds), on_line=lines.append)
    assert code == 0, "\n".join(lines)
    assert not marker.exists() and not (Path.cwd() / "INJECTED").exists()

    (script,) = work_dir.glob("*.sbatch")
    for old in (False, True):
        options = sbatch_options(script.read_text(), old=old)
        assert [o for o in options if o.split("=")[0] in ("--partition", "--account", "--time", "--comment", "--output")] \
            == [f"--partition={evil('p')}", f"--account={evil('a')}", f"--time={evil('t')}",
                f"--output={str(work_dir).replace('%', '%%')}/{script.stem}-%j.out", f"--comment={evil('c')}"]
    (srun,) = [c for c in read_calls(tmp_path) if c[0] == "srun"]
    assert srun[4:6] == [f"--container-image={evil('img')}", f"--container-mounts={evil('m')}"]
    argv = [json.loads(line.partition(" argv ")[2]) for line in lines if " argv " in line]
    assert len(argv) == 2 and all(a[-3:] == ["-m", "training.train_worker", str(run)] for a in argv)
    assert f'node 1 env {json.dumps({"NCCL_IB_GID_INDEX": "3", "PET_TEE": None, "X": evil("x")})}' in lines
    assert any(line.endswith(f"rendezvous node0:29500, run {run}") for line in lines)
    assert any(line.endswith(f"Slurm job 4242 submitted; log {work_dir}/{script.stem}-4242.out") for line in lines)


def test_slurm_work_dir_with_a_backslash_is_refused(tmp_path):
    with pytest.raises(LaunchError, match=r"work_dir .* holds a backslash, .* Fix: choose a folder without one"):
        build_launcher({"kind": "slurm", "work_dir": str(tmp_path / "a\\b")}).render(train_job(), "s3://b/runs/r1")


def test_kubernetes_manifest_keeps_hostile_strings_as_data(tmp_path):
    """The manifest's values are YAML data (whatever they hold), and the pod's command, run by bash as the
    container runs it, passes the run URI and the python path to torchrun verbatim, running nothing injected."""
    import yaml

    marker = tmp_path / "INJECTED"
    evil = lambda tag: hostile(tag, marker)
    odd = tmp_path / "bin $(touch INJECTED) `touch INJECTED`; 'q' \"d\""
    odd.mkdir()
    python = executable(odd / "python; touch INJECTED", FAKE_PYTHON)
    run = f"s3://bucket/runs/{evil('r').replace('/', '_')}"
    settings = {"kind": "kubernetes", "nodes": 2, "image": evil("img"), "python": str(python), "env": {"X": evil("x")},
                "node_selector": {evil("k"): evil("v")}, "gpu_resource": evil("gpu"), "rccl_profiles": []}
    config_map, service, job = yaml.safe_load_all(build_launcher(settings).render(train_job(), run))
    assert config_map["data"] == {"X": evil("x")}
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == evil("img") and pod["nodeSelector"] == {evil("k"): evil("v")}
    assert container["resources"]["limits"] == {evil("gpu"): "8"}
    bash, flag, command = container["command"]
    proc = subprocess.run([bash, flag, command], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "JOB_COMPLETION_INDEX": "1", "DLRMFLOW_RDZV_ENDPOINT": "pod-0:29500"})
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists() and not (tmp_path / "INJECTED").exists()
    said, argv_line = proc.stdout.splitlines()[:2]
    assert said == "dlrmflow: environment profile none (launcher.rccl_profiles)"
    argv = json.loads(argv_line.partition(" argv ")[2])
    assert argv[argv.index("--rdzv-endpoint") + 1] == "pod-0:29500"
    assert argv[argv.index("--rdzv-conf") + 1] == "is_host=0,join_timeout=900"
    assert argv[-3:] == ["-m", "training.train_worker", run]


def test_templates_fail_on_a_missing_value():
    assert render("a {{ x }} b {{y}}", {"x": 1, "y": "z"}) == "a 1 b z"
    with pytest.raises(LaunchError, match="no value for y"):
        render("{{ x }} {{ y }}", {"x": 1})


# ---------------------------------------------------------------- Slurm
# (submitting, streaming the job log, a failed node's exit code, cancelling and a refused submission: on a real
# cluster, tests/e2e/test_slurm.py)


def test_slurm_script_directives_environment_and_node_command(tmp_path):
    run = "s3://bucket/runs/r1"
    launcher = build_launcher({"kind": "slurm", "nodes": 2, "partition": "mi300x", "time_limit": "01:00:00",
                               "sbatch_options": ["--qos=high"], "setup": ["echo setting up"], "env": {"X": "2"},
                               "work_dir": str(tmp_path)})
    text = launcher.render(train_job(resume=True), run, env={"PET_TEE": "3"}, hardware="mi300x")
    assert [line for line in text.splitlines() if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=dlrmflow-train-r1", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8", "#SBATCH --partition=mi300x", "#SBATCH --time=01:00:00", "#SBATCH --exclusive",
        f"#SBATCH --output={tmp_path}/dlrmflow-train-r1-%j.out", "#SBATCH --qos=high"]
    assert "{{" not in text and "echo setting up" in text
    assert all(f"\nexport {k}={v}\n" in text for k, v in {**AMD, "X": "2", "PET_TEE": "3"}.items())  # profile verbatim
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert srun == 'srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c "$node_command"'
    assert launcher.node_command(train_job(resume=True), run) == (   # the submitting interpreter by default
        f'exec {shlex.quote(sys.executable)} -u -m training.launchers.torchrun --nproc-per-node 8 --nnodes 2 '
        '--rdzv-backend c10d --rdzv-endpoint "$DLRMFLOW_RDZV_ENDPOINT" --rdzv-id r1 --rdzv-conf "is_host=$(( '
        'SLURM_NODEID == 0 )),join_timeout=900" --max-restarts 0 -m training.train_worker s3://bucket/runs/r1 --resume')

    cpu = build_launcher({"kind": "slurm", "nodes": 3, "gpus_per_node": 0, "nproc_per_node": 2, "exclusive": False,
                          "rccl_profiles": [], "work_dir": str(tmp_path)}).render(train_job(), run)
    assert "--gpus-per-node" not in cpu and "--exclusive" not in cpu and "export NCCL" not in cpu
    assert "--nproc-per-node 2 --nnodes 3" in cpu


# ---------------------------------------------------------------- the defaults that fit the cluster
# (issue 32: the AMD profile's NICs and HSA_* settings for every job steered NCCL on an NVIDIA cluster away from its
# InfiniBand devices; the nodes' system Python ran the ranks of a job submitted from a venv not activated)

AMD_ONLY = ("NCCL_IB_HCA=bnxt_re", "HSA_", "RCCL_", "GPU_MAX_HW_QUEUES", "NCCL_IB_GID_INDEX")


def _env_section(script: str) -> str:
    """The lines of a rendered batch script that set the ranks' RCCL/NCCL environment."""
    start = script.index("# --- RCCL/NCCL environment profile")
    return script[start:script.index("# --- rendezvous", start)]


def _env_after(section: str, tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    """(the variables that a script's environment section sets, what it says) as bash runs it."""
    proc = subprocess.run(["bash", "-c", f"set -euo pipefail\n{section}\nenv -0 >&2"], cwd=tmp_path, text=True,
                          capture_output=True, timeout=30, env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    env = dict(item.split("=", 1) for item in proc.stderr.split("\0") if "=" in item)
    return {k: v for k, v in env.items() if k in {*AMD, "X"}}, proc.stdout.splitlines()


@pytest.mark.parametrize("hardware", ["h100", "h200"])
def test_an_nvidia_jobs_default_slurm_script_exports_nothing_of_amds(hardware, tmp_path):
    script = build_launcher({"kind": "slurm", "nodes": 2, "env": {"X": "2"}}).render(
        train_job(), "s3://b/runs/r1", hardware=hardware)
    section = _env_section(script)
    assert not [word for word in AMD_ONLY if word in script], section
    assert f"environment profile (infra/rccl/): none (NVIDIA GPUs: sharding.profile {hardware})" in section
    assert _env_after(section, tmp_path) == ({"X": "2"}, [
        f"dlrmflow: environment profile none (NVIDIA GPUs: sharding.profile {hardware})"])


@pytest.mark.parametrize("hardware", ["mi300x", "mi325x", "mi355x"])
def test_an_amd_jobs_default_slurm_script_exports_the_amd_profile(hardware, tmp_path):
    script = build_launcher({"kind": "slurm", "nodes": 2, "env": {"X": "2", "NCCL_IB_GID_INDEX": "5"}}).render(
        train_job(), "s3://b/runs/r1", hardware=hardware)
    section = _env_section(script)
    assert f"environment profile (infra/rccl/): amd-mi3xx (AMD GPUs: sharding.profile {hardware})" in section
    assert "/dev/kfd" not in section   # known when rendered: nothing left to the node
    assert _env_after(section, tmp_path) == ({**AMD, "NCCL_IB_GID_INDEX": "5", "X": "2"}, [   # the launcher's env wins
        f"dlrmflow: environment profile amd-mi3xx (AMD GPUs: sharding.profile {hardware})"])


@pytest.mark.parametrize("hardware", ["auto", "cpu", None])
def test_a_slurm_job_of_unknown_gpus_chooses_its_profile_on_the_node(hardware, tmp_path, monkeypatch):
    """sharding.profile auto (resolved by each rank from its device), cpu, or not known (`dlrmflow render`): the
    script exports the AMD profile where the node has AMD GPUs (/dev/kfd), else none, and says which in the log."""
    monkeypatch.setattr("training.launchers.gpus.AMD_DEVICE", str(tmp_path / "kfd"))   # this machine's "GPUs"
    script = build_launcher({"kind": "slurm", "env": {"X": "2", "NCCL_IB_GID_INDEX": "5"}}).render(
        train_job(), "s3://b/runs/r1", hardware=hardware)
    section = _env_section(script)
    told = f"sharding.profile {hardware}" if hardware else "the job's sharding.profile not known here"
    assert (f"amd-mi3xx where the node has AMD GPUs ({tmp_path}/kfd), else none: chosen on the node when the job "
            f"starts (launcher.gpu_vendor auto, {told})") in section
    outside = section.split("\nfi\n")[1]   # what every node exports, whatever its GPUs: the launcher's env only
    assert not [word for word in AMD_ONLY if word in outside.replace("NCCL_IB_GID_INDEX=5", "")], outside
    host = socket.gethostname()
    assert _env_after(section, tmp_path) == ({"X": "2", "NCCL_IB_GID_INDEX": "5"}, [
        f"dlrmflow: environment profile none: no AMD GPU on {host} (no {tmp_path}/kfd): NCCL/RCCL defaults"])
    (tmp_path / "kfd").touch()
    assert _env_after(section, tmp_path) == ({**AMD, "NCCL_IB_GID_INDEX": "5", "X": "2"}, [
        f"dlrmflow: environment profile amd-mi3xx: AMD GPUs on {host} ({tmp_path}/kfd)"])


@pytest.mark.parametrize("settings, hardware, exported, said", [
    ({"rccl_profiles": ["amd-mi3xx", "debug"]}, "h100", True, "amd-mi3xx, debug (launcher.rccl_profiles)"),
    ({"rccl_profiles": []}, "mi300x", False, "none (launcher.rccl_profiles)"),
    ({"gpu_vendor": "amd"}, "auto", True, "amd-mi3xx (AMD GPUs: launcher.gpu_vendor)"),
    ({"gpu_vendor": "nvidia"}, None, False, "none (NVIDIA GPUs: launcher.gpu_vendor)"),
    ({"gpu_vendor": "none"}, "mi300x", False, "none (no GPUs: launcher.gpu_vendor)"),
])
def test_the_launchers_own_profiles_or_vendor_win(settings, hardware, exported, said):
    script = build_launcher({"kind": "slurm", **settings}).render(train_job(), "s3://b/runs/r1", hardware=hardware)
    section = _env_section(script)
    assert "/dev/kfd" not in section and f"echo 'dlrmflow: environment profile {said}'" in section
    assert all((f"\nexport {k}={v}\n" in section) == exported for k, v in AMD.items())


def test_a_profile_yaml_tells_the_gpus_by_its_base_and_disagreeing_settings_are_refused(tmp_path):
    (tmp_path / "nv.yaml").write_text("base: h200\nhbm_cap: 100 GiB\n")
    (tmp_path / "amd.yaml").write_text("base: mi355x\n")
    (tmp_path / "own.yaml").write_text("compute_device: cuda\n")
    slurm, k8s = build_launcher({"kind": "slurm"}), build_launcher({"kind": "kubernetes"})
    assert slurm.env_choice(str(tmp_path / "nv.yaml")).summary() == \
        f"none (NVIDIA GPUs: sharding.profile {tmp_path}/nv.yaml, base h200)"
    assert slurm.env_choice(str(tmp_path / "amd.yaml")).profiles == ("amd-mi3xx",)
    for unknown in ("own.yaml", "missing.yaml"):
        assert slurm.env_choice(str(tmp_path / unknown)).on_node
    assert k8s.gpus(str(tmp_path / "nv.yaml"))[0] == "nvidia.com/gpu"
    with pytest.raises(LaunchError, match=r"the job's settings disagree about its nodes' GPUs: AMD GPUs by "
                                          r"sharding.profile mi300x; NVIDIA GPUs by gpu_resource nvidia.com/gpu\. Fix"):
        build_launcher({"kind": "kubernetes", "gpu_resource": "nvidia.com/gpu"}).render(
            train_job(), "s3://b/runs/r1", hardware="mi300x")


def test_every_gpu_profile_has_its_vendor():
    """A built-in hardware profile for GPUs that the launchers cannot tell the vendor of would leave the choice of
    its environment to the node."""
    from training.launchers.gpus import PROFILE_VENDORS
    from training.topology import PROFILES

    assert {n for n, p in PROFILES.items() if p.compute_device == "cuda"} == set(PROFILE_VENDORS)


def test_the_ranks_python_is_the_submitting_interpreter_by_default(tmp_path):
    """Submitted from a venv not activated (`.venv/bin/dlrmflow train --launcher slurm`), the ranks run that venv's
    Python (the nodes' system `python` would lack dlrmflow's packages); a container image's own; a missing one
    fails the job at once, saying which and how to fix it."""
    def python(settings):
        launcher = build_launcher({"kind": "slurm", **settings})
        return shlex.split(launcher.node_command(train_job(), "s3://b/runs/r1"))[1], launcher.render(
            train_job(), "s3://b/runs/r1")

    default, script = python({})
    assert default == sys.executable
    assert f"# --- the ranks' Python: {sys.executable} (the submitting interpreter: launcher.python unset) ---" \
        in script
    assert python({"python": "/opt/venv/bin/python"})[0] == "/opt/venv/bin/python"
    in_image, script = python({"container_image": "registry.example/dlrmflow-rocm:0.1.0"})
    assert in_image == "python" and "command -v" not in script
    _, script = python({"python": str(tmp_path / "no such" / "python")})
    (tmp_path / "job.sbatch").write_text(script)
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], capture_output=True, text=True, timeout=30,
                          cwd=tmp_path)
    assert proc.returncode == 127 and proc.stderr == (
        f"dlrmflow: the ranks' Python {tmp_path}/no such/python (launcher.python) is not on {socket.gethostname()}. "
        "Fix: set launcher.python (--launcher.python PATH) to the Python of dlrmflow's environment on the nodes, or "
        "install it at the submitting interpreter's path on a file system the nodes share\n")
    k8s = build_launcher({"kind": "kubernetes"})   # the image's Python: the submitting interpreter's is not there
    *_, job = yaml.safe_load_all(k8s.render(train_job(), "s3://b/runs/r1"))
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][2].split("\nexec ")[1].startswith("python ")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("base, nvidia", [("h100", True), ("mi300x", False)])
def test_a_slurm_jobs_profile_comes_from_its_runs_config(base, nvidia, fake_slurm):
    """Every job of a run (training, evaluation, scoring) reads its hardware profile from the run's config.yaml: a
    profile YAML at a hostile path by its base; the ranks get the vendor's environment and the log says which."""
    tmp_path, settings = fake_slurm
    marker = tmp_path / "INJECTED"
    odd = tmp_path / hostile("p", marker).replace("/", "_")[:90]
    odd.mkdir()
    profile = odd / "gpus $(touch INJECTED).yaml"
    profile.write_text(f"base: {base}\n")
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"sharding": {"profile": str(profile)}}))
    lines: list[str] = []
    launcher = build_launcher({"kind": "slurm", **settings, "env": {"X": "2"}})
    assert launcher.run_ranks(train_job(), str(run), on_line=lines.append) == 0, "\n".join(lines)
    assert not marker.exists() and not (Path.cwd() / "INJECTED").exists()
    vendor = f"NVIDIA GPUs: sharding.profile {profile}, base {base}" if nvidia else \
        f"AMD GPUs: sharding.profile {profile}, base {base}"
    assert f"dlrmflow: environment profile {'none' if nvidia else 'amd-mi3xx'} ({vendor})" in lines
    gid = None if nvidia else "3"
    assert f'node 1 env {json.dumps({"NCCL_IB_GID_INDEX": gid, "PET_TEE": None, "X": "2"})}' in lines


# ---------------------------------------------------------------- the torchrun every node runs

def test_torchrun_options_and_the_rank_tags_of_several_nodes(monkeypatch):
    """A job of several nodes tags each rank's lines with its node and global rank (torch's template): torchrun's
    own ``[defaultN]:`` is the same on every node. One node keeps it."""
    import string

    from training.launchers.torchrun import node_prefix, torchrun_options

    line = build_launcher({"kind": "slurm", "nodes": 2}).node_command(train_job(), "s3://b/runs/r1")
    argv = shlex.split(line.replace('"$DLRMFLOW_RDZV_ENDPOINT"', "n1:29500"))
    options = torchrun_options(argv[argv.index("training.launchers.torchrun") + 1:] + ["--nnodes", "9"])
    assert (options["rdzv-endpoint"], options["nnodes"], options["rdzv-conf"]) == (
        "n1:29500", "2", "is_host=$(( SLURM_NODEID == 0 )),join_timeout=900")   # the rank module's arguments: not
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    assert string.Template(node_prefix(options)).safe_substitute(rank=5, local_rank=1) == "[n2 rank5]:"
    assert node_prefix(torchrun_options(["--nnodes", "1:4", "x.py"])) == "[n2 rank${rank}]:"
    assert node_prefix(torchrun_options(["--nnodes", "1", "-m", "m"])) is None
    assert node_prefix(torchrun_options(["--standalone", "--nproc-per-node", "2", "-m", "m"])) is None
    monkeypatch.setenv("SLURMD_NODENAME", "a$b")
    assert string.Template(node_prefix(options)).safe_substitute(rank=1) == "[a$b rank1]:"
    monkeypatch.delenv("SLURMD_NODENAME")
    assert node_prefix(options) == f"[{socket.gethostname()} rank${{rank}}]:"   # a pod's name on Kubernetes


@pytest.mark.timeout(60)
def test_a_rendezvous_host_that_does_not_resolve_fails_at_once_naming_it(tmp_path):
    """Before torch is imported (it would wait for the host until its rendezvous timed out, minutes later); with a
    wait (Kubernetes: pod 0's DNS name appears once it has an address), after it."""
    import re
    import time

    from helpers.paths import REPO

    cmd = [sys.executable, "-X", "importtime", "-m", "training.launchers.torchrun", "--nproc-per-node", "1",
           "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "no-such-node.invalid:29400", "--rdzv-id",
           "r", "-m", "training.train_worker", str(tmp_path / "run")]
    for wait in (None, "1"):
        env = {**os.environ, "SLURMD_NODENAME": "n2", **({"DLRMFLOW_RDZV_RESOLVE_WAIT_S": wait} if wait else {})}
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and time.monotonic() - start >= (1 if wait else 0)
        errors = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
        assert errors == [
            "dlrmflow: rendezvous host 'no-such-node.invalid' (from --rdzv-endpoint no-such-node.invalid:29400) does "
            f"not resolve on n2{' (waited 1 s)' if wait else ''}. Fix: make every node's name resolve on every node "
            "(DNS or /etc/hosts; on Slurm the NodeName of slurm.conf, on Kubernetes the job's headless Service), or "
            "give the rendezvous an address that does."]
        assert not [line for line in proc.stderr.splitlines() if re.search(r"\|\s*torch(\.|$)", line)]
        assert proc.stdout == ("dlrmflow: waiting up to 1 s for the rendezvous host 'no-such-node.invalid' to "
                               "resolve\n" if wait else "")


# ---------------------------------------------------------------- Kubernetes

FAKE_KUBECTL = r"""
import json, os, shutil, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(["kubectl", *args]) + "\n")
outcome = os.environ.get("FAKE_OUTCOME", "Complete")
verb = args[2]
if verb == "apply":
    shutil.copy(args[4], os.environ["FAKE_MANIFEST"])
    print("configmap/x created\nservice/x created\njob.batch/x created")
elif verb == "wait":
    if args[3] == "--for=condition=" + outcome:
        time.sleep(0.5)
        print("job.batch/x condition met")
    else:
        time.sleep(30)
        sys.exit(1)
elif verb == "logs":
    print("[default0]:training step 1")
    print("[default1]:training step 1")
elif verb == "get":
    print("0\n137")
"""


@pytest.fixture
def fake_kubectl(tmp_path, monkeypatch):
    kubectl = executable(tmp_path / "kubectl", FAKE_KUBECTL)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("FAKE_MANIFEST", str(tmp_path / "applied.yaml"))
    return tmp_path, {"kubectl": str(kubectl), "nodes": 2, "image": "registry.example/dlrmflow-rocm:0.1.0",
                      "cpu": "96", "memory": "1500Gi", "rdzv_timeout_s": 600}


@pytest.mark.timeout(60)
def test_kubernetes_launcher_applies_waits_and_streams(fake_kubectl):
    tmp_path, settings = fake_kubectl
    run = str(tmp_path / "runs" / "Run_1")
    lines: list[str] = []
    launcher = build_launcher({"kind": "kubernetes", **settings, "env": {"X": "2"}})
    ds = str(write_dataset(tmp_path / "ds", {"train": 64, "val": 32}))
    code = launcher.launch(run, TrainConfig(dataset=ds), env={"PET_TEE": "3"}, on_line=lines.append)
    assert code == 0, lines
    assert TrainConfig.from_yaml(f"{run}/config.yaml").dataset == ds
    name = KubernetesLauncher.job_name(train_job(), run)
    assert name.startswith("dlrmflow-train-run-1-") and len(name) <= 40

    calls = read_calls(tmp_path)
    ns = ["kubectl", "--namespace", "dlrmflow"]
    assert calls[0] == [*ns, "delete", "job", name, "--ignore-not-found", "--wait=true"]
    assert calls[1][:5] == [*ns, "apply", "-f"]
    assert sorted(calls[2:], key=json.dumps) == sorted([
        [*ns, "logs", "-f", "-l", f"job-name={name}", "--all-containers", "--max-log-requests=2",
         "--pod-running-timeout=24h"],
        [*ns, "wait", "--for=condition=Complete", f"job/{name}", "--timeout=604800s"],
        [*ns, "wait", "--for=condition=Failed", f"job/{name}", "--timeout=604800s"]], key=json.dumps)
    assert "[default1]:training step 1" in lines and lines[-1] == f"dlrmflow: job/{name} complete"

    config_map, service, job = yaml.safe_load_all((tmp_path / "applied.yaml").read_text())
    assert [d["kind"] for d in (config_map, service, job)] == ["ConfigMap", "Service", "Job"]
    assert config_map["data"] == {**AMD, "X": "2", "PET_TEE": "3"}   # the config's sharding.profile auto: amd.com/gpu
    said = "amd-mi3xx (AMD GPUs: gpu_resource amd.com/gpu, the default)"
    assert config_map["metadata"]["annotations"] == job["metadata"]["annotations"] == {
        "dlrmflow/environment-profile": said}
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {"job-name": name}
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == ("Indexed", 2, 2, 0)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == name and pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert c["image"] == settings["image"]
    assert c["resources"]["limits"] == c["resources"]["requests"] == {"amd.com/gpu": "8", "cpu": "96", "memory": "1500Gi"}
    assert c["env"] == [{"name": "DLRMFLOW_RDZV_ENDPOINT", "value": f"{name}-0.{name}:29500"},
                        {"name": "DLRMFLOW_RDZV_RESOLVE_WAIT_S", "value": "600"}]   # pod 0's DNS name may come late
    assert c["envFrom"] == [{"configMapRef": {"name": f"{name}-env"}}, {"secretRef": {"name": "dlrmflow-s3"}}]
    assert c["command"] == ["bash", "-c",
                            f"echo 'dlrmflow: environment profile {said}'\n"   # in the pods' logs
                            f'exec python -u -m training.launchers.torchrun --nproc-per-node 8 --nnodes 2 --rdzv-backend c10d '
                            f'--rdzv-endpoint "$DLRMFLOW_RDZV_ENDPOINT" --rdzv-id Run_1 '
                            f'--rdzv-conf "is_host=$(( JOB_COMPLETION_INDEX == 0 )),join_timeout=600" '
                            f'--max-restarts 0 -m training.train_worker {run}']
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}} in pod["volumes"]
    assert "serviceAccountName" not in pod and "nodeSelector" not in pod  # unset settings leave no nulls


# every option that changes the manifest, each alone (all but kubectl, context and timeout_s, which change commands)
MANIFEST_OPTIONS = {
    "defaults": {}, "nodes": {"nodes": 4}, "cpu pods": {"gpus_per_node": 0}, "ranks": {"nproc_per_node": 2},
    "python": {"python": "/opt/venv/bin/python"}, "rdzv_port": {"rdzv_port": 1234},
    "rdzv_timeout_s": {"rdzv_timeout_s": 60}, "no rccl profile": {"rccl_profiles": []},
    "rccl profiles": {"rccl_profiles": ["amd-mi3xx", "debug"]}, "env": {"env": {"X": "2", "NCCL_DEBUG": "WARN"}},
    "image": {"image": "registry.example.com/dlrmflow-rocm:0.1.0@sha256:" + "0" * 64}, "namespace": {"namespace": "ml"},
    "gpu_resource": {"gpu_resource": "nvidia.com/gpu"}, "gpu_vendor": {"gpu_vendor": "nvidia"},
    "unknown gpu_resource": {"gpu_resource": "gpu.example.com/accelerator"}, "cpu": {"cpu": "96"},
    "memory": {"memory": "1500Gi"},
    "shm_size": {"shm_size": "1Ti"}, "extra_resources": {"extra_resources": {"rdma/hca": "8", "ephemeral-storage": "1Ti"}},
    "no s3_secret": {"s3_secret": None}, "service_account": {"service_account": "dlrmflow"},
    "image_pull_secret": {"image_pull_secret": "registry-creds"},
    "node_selector": {"node_selector": {"node.kubernetes.io/instance-type": "mi300x"}}, "ttl_s": {"ttl_s": 0},
}


def test_manifest_options_are_all_covered():
    covered = {k for options in MANIFEST_OPTIONS.values() for k in options}
    assert covered == set(KubernetesLauncherConfig.model_fields) - {"kind", "kubectl", "context", "timeout_s"}


@pytest.mark.parametrize("options", MANIFEST_OPTIONS.values(), ids=MANIFEST_OPTIONS.keys())
def test_every_rendered_manifest_is_valid_for_the_kubernetes_api(options):
    import yaml

    launcher = build_launcher({"kind": "kubernetes", **options})
    for run, resume, env in [("s3://bucket/prod/runs/r1", False, None),
                             ("s3://bucket/prod/runs/Nightly_CTR.2026-11-03-" + "x" * 80, True, {"PET_TEE": "3"})]:
        docs = list(yaml.safe_load_all(launcher.render(train_job(resume), run, env=env)))
        assert [d["kind"] for d in docs] == ["ConfigMap", "Service", "Job"]
        for doc in docs:
            check_object(doc, f"{options} {run}")


def test_the_schema_check_finds_a_field_in_the_wrong_place():
    import yaml

    job = list(yaml.safe_load_all(build_launcher({"kind": "kubernetes"}).render(train_job(), "s3://b/runs/r1")))[-1]
    job["spec"]["template"]["spec"]["parallelism"] = 1   # a Job's field in the pod spec
    with pytest.raises(AssertionError, match=r"spec.template.spec: Additional properties .*'parallelism'"):
        check_object(job, "test")
    job["spec"]["template"]["spec"].pop("parallelism")
    job["spec"]["completions"] = "2"
    with pytest.raises(AssertionError, match=r"spec.completions: '2' is not of type 'integer'"):
        check_object(job, "test")


@pytest.mark.timeout(60)
def test_kubernetes_launcher_maps_a_failed_job_to_the_pod_exit_code(fake_kubectl, monkeypatch):
    tmp_path, settings = fake_kubectl
    monkeypatch.setenv("FAKE_OUTCOME", "Failed")
    lines: list[str] = []
    ds = str(write_dataset(tmp_path / "ds", {"train": 64, "val": 32}))
    code = build_launcher({"kind": "kubernetes", **settings}).launch(
        str(tmp_path / "r9"), TrainConfig(dataset=ds), on_line=lines.append)
    assert code == 137 and lines[-1] == "dlrmflow: job/dlrmflow-train-r9 failed (exit code 137)"
    assert read_calls(tmp_path)[-1][3:6] == ["get", "pods", "-l"]


@pytest.mark.parametrize("settings, hardware, resource, amd", [
    ({}, "h100", "nvidia.com/gpu", False), ({}, "h200", "nvidia.com/gpu", False),
    ({"gpu_resource": "nvidia.com/gpu"}, "auto", "nvidia.com/gpu", False),
    ({"gpu_vendor": "nvidia"}, None, "nvidia.com/gpu", False),
    ({}, "mi300x", "amd.com/gpu", True), ({}, "auto", "amd.com/gpu", True), ({}, None, "amd.com/gpu", True),
    ({"gpus_per_node": 0}, "auto", None, False),
    ({"gpu_resource": "nvidia.com/gpu", "rccl_profiles": ["amd-mi3xx"]}, "h100", "nvidia.com/gpu", True),
])
def test_kubernetes_gpus_and_environment_follow_the_vendor(settings, hardware, resource, amd):
    """An NVIDIA job's pods request nvidia.com/gpu and get nothing of AMD's environment; an AMD job's (and by default,
    amd.com/gpu) the AMD profile; the manifest's annotation says which and why."""
    docs = list(yaml.safe_load_all(build_launcher({"kind": "kubernetes", **settings}).render(
        train_job(), "s3://b/runs/r1", hardware=hardware)))
    config_map, _, job = docs
    for doc in docs:
        check_object(doc, f"{settings} {hardware}")
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert list(c.get("resources", {}).get("limits", {})) == ([resource] if resource else [])
    assert config_map.get("data", {}) == (AMD if amd else {})
    said = job["metadata"]["annotations"]["dlrmflow/environment-profile"]
    assert said.startswith("amd-mi3xx" if amd else "none") and "/dev/kfd" not in c["command"][2]
    assert c["command"][2].startswith(f"echo 'dlrmflow: environment profile {said}'\n")
    if not amd:
        assert not [word for word in AMD_ONLY if word in yaml.safe_dump_all(docs)]


@pytest.mark.timeout(60)
def test_kubernetes_pods_of_an_unknown_gpu_resource_choose_their_profile(tmp_path, monkeypatch):
    monkeypatch.setattr("training.launchers.gpus.AMD_DEVICE", str(tmp_path / "kfd"))
    python = executable(tmp_path / "python", FAKE_PYTHON)
    config_map, _, job = yaml.safe_load_all(build_launcher({
        "kind": "kubernetes", "gpu_resource": "gpu.example.com/accelerator", "python": str(python),
        "env": {"X": "2"}}).render(train_job(), "s3://b/runs/r1", hardware="auto"))
    assert config_map["data"] == {"X": "2"}   # the AMD profile: only where the pod has AMD GPUs
    assert job["metadata"]["annotations"]["dlrmflow/environment-profile"] == (
        f"amd-mi3xx where the node has AMD GPUs ({tmp_path}/kfd), else none: chosen on the node when the job starts "
        "(launcher.gpu_vendor auto, sharding.profile auto)")
    (c,) = job["spec"]["template"]["spec"]["containers"]

    def pod() -> list[str]:
        proc = subprocess.run(c["command"], cwd=tmp_path, capture_output=True, text=True, timeout=30, env={
            **os.environ, "JOB_COMPLETION_INDEX": "0", "DLRMFLOW_RDZV_ENDPOINT": "pod-0:29500", "X": "2"})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    host = socket.gethostname()
    said, _, env = pod()
    assert said == f"dlrmflow: environment profile none: no AMD GPU on {host} (no {tmp_path}/kfd): NCCL/RCCL defaults"
    assert env == f'node 0 env {json.dumps({"NCCL_IB_GID_INDEX": None, "PET_TEE": None, "X": "2"})}'
    (tmp_path / "kfd").touch()
    said, _, env = pod()
    assert said == f"dlrmflow: environment profile amd-mi3xx: AMD GPUs on {host} ({tmp_path}/kfd)"
    assert env == f'node 0 env {json.dumps({"NCCL_IB_GID_INDEX": "3", "PET_TEE": None, "X": "2"})}'


# ---------------------------------------------------------------- evaluation and scoring: the same launchers

def _trained_run(tmp_path) -> str:
    """A run folder with config.yaml and a complete checkpoint 4 ('latest') on a train-only dataset (no torchrun)."""
    from helpers import stores

    return stores.run(str(tmp_path / "store"), "r5", str(write_dataset(tmp_path / "ds", {"train": 64})))


def test_scoring_refuses_one_node_of_a_hand_started_job_before_any_work():
    from training.score import scoring_launcher

    with pytest.raises(UserError, match="one node of a job started by hand"):
        scoring_launcher({"kind": "local", "nnodes": 2, "rdzv_endpoint": "h:1"})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("job", ["evaluate", "score"])
def test_evaluation_and_scoring_apply_their_jobs_on_kubernetes(job, fake_kubectl):
    """The Kubernetes launcher applies an evaluation's or a scoring's job as training's: the job's name in the Job's
    name, its label and its container; every pod runs the job's rank module with its arguments."""
    from training.config import EvaluateConfig
    from training.evaluate import evaluate_run
    from training.score import predict_parts

    tmp_path, settings = fake_kubectl
    run, lines = _trained_run(tmp_path), []
    launcher = {"kind": "kubernetes", **settings}
    if job == "evaluate":
        config = EvaluateConfig(split="train", checkpoint="latest")
        evaluate_run(run, config, launcher=launcher, on_line=lines.append)
        args = ["-m", "training.evaluate_worker", run, "--config", config.model_dump_json()]
    else:
        encoded = str(write_dataset(tmp_path / "encoded", {"train": 64}))
        predict_parts(run, 4, encoded, "train", tmp_path / "parts", launcher=launcher, on_line=lines.append)
        args = None
    _, _, job_doc = yaml.safe_load_all((tmp_path / "applied.yaml").read_text())
    name = job_doc["metadata"]["name"]
    assert name.startswith(f"dlrmflow-{job}-r5") and job_doc["metadata"]["labels"]["app.kubernetes.io/component"] == job
    (c,) = job_doc["spec"]["template"]["spec"]["containers"]
    assert c["name"] == job and c["command"][:2] == ["bash", "-c"]
    assert "-m training.launchers.torchrun --nproc-per-node 8 --nnodes 2" in c["command"][2]
    if args is None:   # the scoring's rows and parts in its scratch folder of the run folder (then removed)
        token = name.removeprefix("dlrmflow-score-r5-")
        scratch = f"{run}/{RunDir.SCORING}/{token}"
        args = ["-m", "training.score_worker", run, "--step", "4", "--dataset", f"{scratch}/dataset", "--split",
                "train", "--parts", f"{scratch}/parts"]
        assert not (Path(run) / RunDir.SCORING).exists()
    assert c["command"][2].endswith(" " + " ".join(shlex.quote(a) for a in args))
    assert lines[-1] == f"dlrmflow: job/{name} complete"
