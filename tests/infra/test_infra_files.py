"""infra/: the images, the compose stack, the Kubernetes manifests, the Slurm script and the RCCL profiles
agree with pyproject.toml and with each other (nothing here can be built or applied without Docker,
Kubernetes or Slurm, so this checks what can be checked: they parse, pin the same versions, reference
files that exist, and take their RCCL settings and credentials from the one place each belongs)."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from helpers.kube_schema import KUBERNETES_VERSION, check_object
from training.launchers import build_launcher, read_env_file, train_job

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
DOCKER, K8S, SLURM, RCCL = INFRA / "docker", INFRA / "k8s", INFRA / "slurm", INFRA / "rccl"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PY_MINOR = re.fullmatch(r">=(\d+\.\d+),<\d+\.\d+", PYPROJECT["project"]["requires-python"]).group(1)  # the lowest: the images'
PINS = dict(re.fullmatch(r"([\w-]+)==([\w.]+)", d.split("#")[0].strip()).groups()
            for d in PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["cpu"]
            if "==" in d)
AMD_SETTINGS = {"NCCL_IB_HCA": ",".join(f"bnxt_re{i}" for i in range(8)), "NCCL_IB_GID_INDEX": "3",
                "NCCL_NCHANNELS_PER_NET_PEER": "8", "RCCL_MSCCL_ENABLE": "0", "RCCL_MSCCLPP_ENABLE": "0",
                "HSA_ENABLE_IPC_MODE_LEGACY": "1", "HSA_NO_SCRATCH_RECLAIM": "1"}
RCCL_VAR = re.compile(r"\b(NCCL_[A-Z_]+|RCCL_[A-Z_]+|HSA_[A-Z_]+)\s*[:=]\s*\S")


def _dockerfile(name: str) -> tuple[str, dict[str, str]]:
    text = (DOCKER / name).read_text()
    return text, dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_pyproject_pins_what_the_images_install():
    assert PINS["prefect"] == "3.9.1" and PY_MINOR == "3.11"
    assert {"torch", "fbgemm-gpu-cpu", "torchrec"} <= PINS.keys()


def _locked() -> dict[str, tuple[str, list[str]]]:
    """infra/requirements.lock: normalized name -> (version, sha256 hashes)."""
    locked: dict[str, tuple[str, list[str]]] = {}
    name = None
    for line in (INFRA / "requirements.lock").read_text().splitlines():
        if m := re.match(r"([A-Za-z0-9][\w.-]*)==(\S+)", line):
            name = canonicalize_name(m[1])
            locked[name] = (m[2], [])
        elif m := re.search(r"--hash=sha256:([0-9a-f]{64})", line):
            locked[name][1].append(m[1])
    return locked


def test_lock_satisfies_pyproject_and_leaves_out_cuda_fbgemm():
    """`make install` syncs .venv to the lock: it must hold what pyproject.toml asks for (the cpu and
    test extras included), a hash for every archive, the project itself, and never torchrec's CUDA
    fbgemm-gpu (infra/uv-excludes.txt)."""
    locked = _locked()
    assert "-e ." in (INFRA / "requirements.lock").read_text().splitlines()
    assert all(hashes for _version, hashes in locked.values())
    extras = PYPROJECT["project"]["optional-dependencies"]
    for spec in PYPROJECT["project"]["dependencies"] + extras["cpu"] + extras["test"]:
        req = Requirement(spec)
        version, _hashes = locked[canonicalize_name(req.name)]
        assert req.specifier.contains(version), f"the lock has {req.name}=={version}, pyproject.toml asks {spec}"
    assert locked["torch"][0] == PINS["torch"] + "+cpu"
    for excluded in (INFRA / "uv-excludes.txt").read_text().split():
        assert canonicalize_name(excluded) not in locked


def test_rocm_image_pins_the_same_stack_as_pyproject():
    text, args = _dockerfile("rocm.Dockerfile")
    assert args["BASE_IMAGE"] == "rocm/primus:v26.1" and "FROM ${BASE_IMAGE}" in text
    assert "@sha256:<digest>" in text  # where to pin the digest
    assert args["ROCM_INDEX"].startswith("https://download.pytorch.org/whl/rocm7.")
    assert args["PYTHON_VERSION"] == PY_MINOR
    assert (args["TORCH_VERSION"], args["FBGEMM_GPU_VERSION"], args["TORCHREC_VERSION"]) == (
        PINS["torch"], PINS["fbgemm-gpu-cpu"], PINS["torchrec"])
    assert '--no-deps "torchrec==${TORCHREC_VERSION}"' in text
    # the project's own dependencies without the cpu extra, the ROCm torch stack held by constraints
    assert re.search(r"uv pip install --constraints \S+ .*\s\.\s", text)
    assert ".[cpu]" not in text


def test_cpu_image_follows_install_sh():
    text, args = _dockerfile("cpu.Dockerfile")
    assert re.search(rf"^FROM python:{re.escape(PY_MINOR)}-slim\S*$", text, re.M)
    install_sh = (INFRA / "install.sh").read_text()
    assert re.search(r'uv==([\d.]+)', install_sh).group(1) == args["UV_VERSION"]
    assert "--excludes infra/uv-excludes.txt" in text and '".[cpu]"' in text
    assert (INFRA / "uv-excludes.txt").read_text().split() == ["fbgemm-gpu"]


@pytest.mark.parametrize("name", ["cpu.Dockerfile", "rocm.Dockerfile"])
def test_dockerfiles_copy_files_that_exist_and_are_not_ignored(name):
    text, args = _dockerfile(name)
    copies = re.findall(r"^COPY (.+)$", text, re.M)
    assert copies
    ignore = (DOCKER / f"{name}.dockerignore").read_text().split()
    for line in copies:
        *sources, _dest = line.split()
        for src in sources:
            assert (REPO / src).exists(), f"{name}: COPY {src} does not exist"
            assert f"!{src}" in ignore or f"!{src}/**" in ignore, f"{name}: {src} is excluded by the dockerignore"
    packages = re.search(r'include = \[(.+)\]', (REPO / "pyproject.toml").read_text()).group(1)
    for package in re.findall(r'"(\w+)\*"', packages):  # every package the wheel holds is in the image
        assert f"COPY {package} ./{package}" in text, f"{name}: the package {package} is not copied"
    assert args["KUBECTL_VERSION"].startswith("v1.") and "sha256sum -c" in text
    # the manifests are checked against the API of the Kubernetes the images' kubectl is for
    assert args["KUBECTL_VERSION"].startswith(f"v{KUBERNETES_VERSION}."), (args["KUBECTL_VERSION"], KUBERNETES_VERSION)


def test_compose_stack():
    compose = _compose()
    s = compose["services"]
    assert set(s) == {"postgres", "prefect-server", "minio", "create-bucket", "worker"}
    for name, svc in s.items():
        image = svc["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: unpinned image {image}"
    assert s["prefect-server"]["image"] == f"prefecthq/prefect:{PINS['prefect']}-python{PY_MINOR}"
    assert s["minio"]["image"].startswith("minio/minio:RELEASE.") and s["create-bucket"]["image"].startswith("minio/mc:RELEASE.")
    assert s["postgres"]["image"].startswith("postgres:")

    server = s["prefect-server"]["environment"]
    assert server["PREFECT_API_DATABASE_CONNECTION_URL"].startswith("postgresql+asyncpg://prefect:")
    assert server["PREFECT_API_DATABASE_CONNECTION_URL"].endswith("@postgres:5432/prefect")
    assert server["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert server["PREFECT_SERVER_API_HOST"] == "0.0.0.0" and server["PREFECT_SERVER_API_PORT"] == "4200"
    for name in ("postgres", "prefect-server", "minio"):
        assert s[name]["healthcheck"]["test"], name
    assert "mc mb --ignore-existing store/dlrmflow" in s["create-bucket"]["command"][0]

    worker = s["worker"]
    assert (REPO / "infra/docker" / worker["build"]["context"] / worker["build"]["dockerfile"]).resolve() == DOCKER / "cpu.Dockerfile"
    cmd = worker["command"]
    assert cmd[:4] == ["dlrmflow", "serve", "--store", "s3://dlrmflow/prod"]
    from flows.cli import build_parser
    build_parser(only="serve").parse_args(cmd[1:])  # a real command line
    env = worker["environment"]
    assert env["AWS_ENDPOINT_URL"] == "http://minio:9000" and env["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= env.keys()
    assert worker["depends_on"] == {"prefect-server": {"condition": "service_healthy"},
                                    "create-bucket": {"condition": "service_completed_successfully"}}
    for vol in (v for svc in s.values() for v in svc.get("volumes", [])):
        assert vol.split(":")[0] in compose["volumes"], vol  # named volumes only: nothing to be missing


def test_compose_credentials_are_marked_dev_only():
    for line in (DOCKER / "compose.yaml").read_text().splitlines():
        if re.search(r"minioadmin|POSTGRES_PASSWORD:-", line) and not line.lstrip().startswith("#"):
            assert "DEV-ONLY" in line or "${POSTGRES_PASSWORD:-prefect}@" in line, line


def _k8s_docs() -> dict[str, list[dict]]:
    docs = {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in K8S.glob("*.yaml")
            if p.name != "train-job.yaml"}  # the template: checked rendered, below
    launcher = build_launcher({"kind": "kubernetes", "nodes": 2})
    docs["train-job.yaml (rendered)"] = list(yaml.safe_load_all(launcher.render(train_job(), "s3://b/runs/r1")))
    return docs


def test_kubernetes_manifests_are_objects():
    docs = _k8s_docs()
    assert {"rbac.yaml", "prefect-worker.yaml", "train-job.yaml (rendered)"} <= docs.keys()
    for name, objs in docs.items():
        assert objs, name
        for obj in objs:
            assert {"apiVersion", "kind", "metadata"} <= obj.keys() and obj["metadata"].get("name"), (name, obj)
    worker = docs["prefect-worker.yaml"][0]["spec"]["template"]["spec"]["containers"][0]
    assert worker["image"] == f"prefecthq/prefect:{PINS['prefect']}-python{PY_MINOR}-kubernetes"
    assert worker["args"][:5] == ["prefect", "worker", "start", "--pool", "dlrmflow-k8s"]


def test_prefect_work_pool_template():
    tmpl = json.loads((K8S / "prefect-work-pool.json").read_text())
    job = tmpl["job_configuration"]["job_manifest"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["name"] == "prefect-job" and c["env"] == "{{ env }}" and c["args"] == "{{ command }}"
    assert c["resources"]["limits"]["amd.com/gpu"] == c["resources"]["requests"]["amd.com/gpu"] == "{{ gpus }}"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "{{ shm_size }}"}} in pod["volumes"]
    assert c["envFrom"] == [{"secretRef": {"name": "{{ s3_secret }}"}}, {"configMapRef": {"name": "{{ rccl_configmap }}"}}]
    props = tmpl["variables"]["properties"]
    placeholders = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", json.dumps(tmpl["job_configuration"])))
    assert placeholders <= props.keys(), placeholders - props.keys()
    assert all(p.get("description") for p in props.values())


def test_kubernetes_manifests_are_valid_for_the_kubernetes_api():
    """Every object of infra/k8s/ against the API's schema (the launcher's rendering of train-job.yaml for each
    option: tests/training/test_infra_launchers.py); the work pool's Job with its placeholders filled in as
    Prefect's Kubernetes worker fills them (command split into args, env as name/value pairs)."""
    for name, objs in _k8s_docs().items():
        for obj in objs:
            check_object(obj, name)
    tmpl = json.loads((K8S / "prefect-work-pool.json").read_text())
    values = {k: v.get("default") for k, v in tmpl["variables"]["properties"].items()}
    values |= {"name": "flow-run-1", "labels": {"prefect.io/flow-run-id": "1"}, "env": [{"name": "A", "value": "1"}],
               "command": ["prefect", "flow-run", "execute"]}
    filled = re.sub(r'"\{\{\s*(\w+)\s*\}\}"', lambda m: json.dumps(values[m.group(1)]),
                    json.dumps(tmpl["job_configuration"]["job_manifest"]))
    check_object(json.loads(filled), "prefect-work-pool.json job_manifest")


def test_gpu_pods_get_amd_gpus_and_shared_memory():
    for name, objs in _k8s_docs().items():
        for obj in objs:
            if obj["kind"] != "Job":
                continue
            pod = obj["spec"]["template"]["spec"]
            for c in pod["containers"]:
                assert "amd.com/gpu" in c["resources"]["limits"], name
                assert any(m["mountPath"] == "/dev/shm" for m in c["volumeMounts"]), name
            assert any(v.get("emptyDir", {}).get("medium") == "Memory" for v in pod["volumes"]), name


def test_one_rccl_profile_is_the_only_source_of_rccl_settings():
    profile = read_env_file(RCCL / "amd-mi3xx.env")
    assert AMD_SETTINGS.items() <= profile.items()
    for path in [*K8S.iterdir(), *SLURM.iterdir(), *DOCKER.iterdir()]:
        text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        assert not RCCL_VAR.search(text), f"{path}: RCCL/NCCL variables belong in infra/rccl/*.env"
    rendered = build_launcher({"kind": "slurm"}).render(train_job(), "s3://b/runs/r1", hardware="mi300x")
    assert all(f"\nexport {k}={v}\n" in rendered for k, v in profile.items())   # an AMD job's default
    cm = next(yaml.safe_load_all(build_launcher({"kind": "kubernetes"}).render(train_job(), "s3://b/runs/r1")))
    assert cm["kind"] == "ConfigMap" and cm["data"] == profile   # amd.com/gpu, the default GPU resource


def test_no_credentials_outside_the_dev_compose_file():
    secret_value = re.compile(r"(AWS_SECRET_ACCESS_KEY|AWS_ACCESS_KEY_ID|MINIO_ROOT_PASSWORD)\s*[:=]\s*['\"]?[A-Za-z0-9/+]{6,}")
    for path in [*K8S.iterdir(), *SLURM.iterdir(), *RCCL.iterdir(), DOCKER / "cpu.Dockerfile", DOCKER / "rocm.Dockerfile",
                 REPO / "docs" / "deploy.md"]:
        text = path.read_text()
        assert "minioadmin" not in text or path.name == "deploy.md", path
        for m in secret_value.finditer(text):
            assert "$" in text[m.start():m.end() + 3] or "<" in text[m.start():m.end() + 3], f"{path}: literal credential {m.group(0)}"


def test_slurm_script_template_renders_to_valid_bash(tmp_path):
    import subprocess

    script = build_launcher({"kind": "slurm", "nodes": 2}).render(train_job(resume=True), "s3://b/runs/r 1")
    (tmp_path / "s.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "s.sh")]).returncode == 0
    assert re.search(r"^srun .*bash -c \"\$node_command\"$", script, re.M)
    node_command = shlex.split(re.search(r"^node_command=(.+)$", script, re.M).group(1))[0]
    assert node_command.endswith("-m training.train_worker 's3://b/runs/r 1' --resume")  # quoted for the node's shell


def test_deploy_docs_commands_match_the_cli():
    """Every `dlrmflow ...` line in docs/deploy.md parses with the real CLI (`dlrmflow render` lines run)."""
    from flows.cli import build_parser, main

    text = (REPO / "docs" / "deploy.md").read_text()
    block, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside:
            block.append(line)
    lines = [line.strip() for line in "\n".join(block).replace("\\\n", " ").splitlines()]
    commands = [line for line in lines if line.startswith("dlrmflow ")]
    assert len(commands) >= 6
    for line in commands:
        argv = shlex.split(line.split(" #")[0])
        if argv[1] == "render":
            assert main(argv[1:]) == 0, line
        else:
            build_parser(only=argv[1]).parse_args(argv[1:])
    for path in re.findall(r"\binfra/[\w./-]+\.(?:yaml|json|env|sbatch|Dockerfile)\b", text):
        assert (REPO / path).exists(), f"docs/deploy.md names {path}, which does not exist"

