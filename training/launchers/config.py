"""LauncherConfig: where the ranks of a job (train, evaluate, score) run: this machine, a Slurm allocation, a
Kubernetes Job, and how many there are (``nproc`` of the local launcher; ``nodes`` x ``nproc_per_node`` of the others).

One config model per kind, told apart by ``kind`` (a discriminated union): a Prefect form shows
only the chosen launcher's fields and the command line takes ``--launcher KIND``. Plain pydantic
(JSON-serialisable, with descriptions); ``build_launcher(cfg)`` turns it into a ``Launcher``.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, model_validator

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # a shell variable's name (bash `export`, a ConfigMap key)
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")   # RFC 1123 label: a namespace
DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")   # RFC 1123 subdomain: a Secret, a service account
QUANTITY = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+))?")


def _one_line(value: str) -> str:
    """A launcher setting is data in a rendered script or manifest: no control characters (a newline would start
    a new line of the batch script, a NUL cut it)."""
    bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise ValueError(f"holds the control character {bad!r} at position {value.index(bad)}. Fix: give it on "
                         "one line, without tabs or other control characters (one list item per line)")
    return value


def _env_name(value: str) -> str:
    if not ENV_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not an environment variable name. Fix: use letters, digits and '_', "
                         "not starting with a digit")
    return value


def _matching(pattern: re.Pattern, what: str):
    def check(value: str | None) -> str | None:
        if value is not None and not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value
    return check


Text = Annotated[str, AfterValidator(_one_line)]
"""A launcher setting's text: one line, no control characters."""
EnvName = Annotated[str, AfterValidator(_env_name)]
Quantity = Annotated[str, AfterValidator(_matching(QUANTITY, "a Kubernetes quantity. Fix: e.g. '96', '500m', "
                                                   "'1500Gi' or '1.5e3'"))]
Namespace = Annotated[str, AfterValidator(_matching(DNS_LABEL, "a Kubernetes namespace. Fix: lower-case letters, "
                                                    "digits and '-', starting and ending with a letter or digit, at "
                                                    "most 63"))]
ObjectName = Annotated[str, AfterValidator(_matching(DNS_NAME, "a Kubernetes object name. Fix: lower-case letters, "
                                                     "digits, '-' and '.', starting and ending with a letter or "
                                                     "digit, at most 253"))]


class _BaseLauncherConfig(BaseModel):
    """What every launcher takes."""

    model_config = ConfigDict(extra="forbid")

    env: dict[EnvName, Text] = Field(default_factory=dict, description="Extra environment of every rank "
                                "(after the RCCL profiles, so it overrides them). Never put secrets here.")


class LocalLauncherConfig(_BaseLauncherConfig):
    """torchrun as a subprocess of this process (the default; also one node of a hand-started multi-node run)."""

    kind: Literal["local"] = Field("local", description="Launcher: 'local' runs torchrun here; 'slurm' submits "
                                   "an sbatch job and waits; 'kubernetes' applies an indexed Job and waits.")

    nproc: int = Field(1, ge=1, description="Processes (ranks) on this machine.")
    nnodes: int = Field(1, ge=1, description="Nodes in the job. >1: start the same launcher on every node "
                        "with the same rdzv_endpoint.")
    rdzv_endpoint: Text | None = Field(None, description="HOST:PORT of the c10d rendezvous (multi-node only).")
    node_rank: int | None = Field(None, ge=0, description="This node's rank (optional with c10d rendezvous).")
    rccl_profiles: list[Text] = Field(default_factory=list, description="RCCL/NCCL environment profiles "
                                     "(`infra/rccl/NAME.env`, or a path) exported to the ranks. Default: none.")
    start_method: Literal["fork", "spawn"] = Field("fork", description="How the ranks start on a CPU-only torch "
        "build: 'fork' from torchrun once it has imported what every rank imports (~4 CPU-seconds less per rank); "
        "'spawn' a fresh interpreter per rank, as a build with GPU support always does (a forked rank could not "
        "use the GPU).")


class _ClusterLauncherConfig(_BaseLauncherConfig):
    """What the Slurm and Kubernetes launchers share: nodes (pods) of ranks meeting at a c10d rendezvous."""

    nodes: int = Field(1, ge=1, description="Nodes to allocate (Slurm: #SBATCH --nodes; Kubernetes: pods of the "
                       "indexed Job).")
    gpus_per_node: int = Field(8, ge=0, description="GPUs per node (Slurm: --gpus-per-node; Kubernetes: the GPU "
                               "resource per pod); also the ranks per node unless nproc_per_node is set. 0: CPU nodes.")
    nproc_per_node: int | None = Field(None, ge=1, description="Ranks (torchrun processes) per node. "
                                       "Default: gpus_per_node.")
    rdzv_port: int = Field(29500, ge=1, le=65535, description="c10d rendezvous port on the first node (pod 0).")
    rdzv_timeout_s: int = Field(900, ge=1, description="How long nodes wait for each other at the rendezvous "
                                "(image pulls and scheduling included).")
    gpu_vendor: Literal["auto", "amd", "nvidia", "none"] = Field("auto", description="The nodes' GPUs, which "
        "choose the RCCL/NCCL environment when rccl_profiles is unset: amd -> amd-mi3xx; nvidia, none (CPU nodes) -> "
        "none. auto: from the job's sharding.profile (mi300x/mi325x/mi355x: amd; h100/h200: nvidia), the Kubernetes "
        "gpu_resource, gpus_per_node 0 (none); where nothing tells (sharding.profile auto), the job looks on its "
        "node when it starts (/dev/kfd: amd).")
    rccl_profiles: list[Text] | None = Field(None, description="RCCL/NCCL environment profiles "
                                            "(`infra/rccl/NAME.env`, or a path) exported on every node, e.g. "
                                            "[amd-mi3xx, debug] for NCCL_DEBUG=INFO. Default: the GPU vendor's "
                                            "(gpu_vendor): amd-mi3xx for AMD GPUs, none for NVIDIA and CPU nodes.")

    @model_validator(mode="before")
    @classmethod
    def _no_nproc(cls, data):
        if isinstance(data, dict) and "nproc" in data:
            raise ValueError("nproc is the local launcher's ranks; a cluster job has nodes x nproc_per_node "
                             "(default: gpus_per_node). Fix: set launcher.nproc_per_node (--launcher.nproc-per-node N)")
        return data

    @property
    def ranks_per_node(self) -> int:
        return self.nproc_per_node or self.gpus_per_node or 1


class SlurmLauncherConfig(_ClusterLauncherConfig):
    """`sbatch --wait` of infra/slurm/train.sbatch: one torchrun per node via srun, c10d rendezvous on the first node."""

    kind: Literal["slurm"] = "slurm"

    python: Text | None = Field(None, description="Python on the nodes (a venv's). Default: the submitting "
                                "interpreter (this process's sys.executable: the nodes must see it at the same path, "
                                "on a shared file system or in the same image), or 'python' in a container_image.")
    cpus_per_task: int | None = Field(None, ge=1, description="#SBATCH --cpus-per-task (CPU cores per node's torchrun).")
    partition: Text | None = Field(None, description="#SBATCH --partition.")
    account: Text | None = Field(None, description="#SBATCH --account.")
    time_limit: Text | None = Field(None, description="#SBATCH --time, e.g. '04:00:00'.")
    exclusive: bool = Field(True, description="#SBATCH --exclusive (whole nodes).")
    sbatch_options: list[Text] = Field(default_factory=list, description="Further sbatch options, one per item, "
                                      "e.g. '--qos=high' or '--constraint=mi300x'.")
    setup: list[Text] = Field(default_factory=list, description="Shell lines run on the batch host before srun, e.g. "
                             "'module load rocm/7.1' or 'source /shared/dlrmflow/.venv/bin/activate'.")
    container_image: Text | None = Field(None, description="Run each node in this image with pyxis/enroot "
                                        "(srun --container-image=...). None: the nodes' own environment.")
    container_mounts: list[Text] = Field(default_factory=list, description="srun --container-mounts entries "
                                        "(SRC:DST), e.g. the shared run folder.")
    work_dir: Text = Field("~/.dlrmflow/slurm", description="Folder for the rendered scripts and job logs; must be "
                          "visible to this process and the batch host (a shared file system).")
    sbatch: Text = Field("sbatch", description="sbatch executable.")
    scancel: Text = Field("scancel", description="scancel executable (cancels the job if this process is "
                         "interrupted, and a stale run lease's job before its take-over).")
    squeue: Text = Field("squeue", description="squeue executable (how a cancelled job is seen to have ended).")


class KubernetesLauncherConfig(_ClusterLauncherConfig):
    """An indexed Job (one pod per node) + a headless Service for the rendezvous, applied with kubectl."""

    kind: Literal["kubernetes"] = "kubernetes"

    image: Text = Field("ghcr.io/example/dlrmflow-rocm:0.1.0", description="Training image (infra/docker/rocm.Dockerfile).")
    python: Text = Field("python", description="Python in the image (the first on its PATH by default: the "
                         "image's environment; the submitting interpreter's path means nothing there).")
    namespace: Namespace = Field("dlrmflow", description="Namespace of the Job, Service and ConfigMap.")
    gpu_resource: Text | None = Field(None, description="Extended resource name of the GPUs. Default: the GPU "
                                      "vendor's device plugin's: nvidia.com/gpu for NVIDIA GPUs (gpu_vendor nvidia, "
                                      "or an NVIDIA sharding.profile), else amd.com/gpu.")
    cpu: Quantity | None = Field(None, description="CPU request/limit per pod, e.g. '96'.")
    memory: Quantity | None = Field(None, description="Memory request/limit per pod, e.g. '1500Gi'.")
    shm_size: Quantity = Field("256Gi", description="Size limit of /dev/shm (an in-memory emptyDir).")
    extra_resources: dict[Text, Quantity] = Field(default_factory=dict, description="More resource limits per pod, e.g. "
                                            "{'rdma/hca': '1'} for RDMA NICs (cluster-specific).")
    s3_secret: ObjectName | None = Field("dlrmflow-s3", description="Secret whose keys (AWS_ACCESS_KEY_ID, "
                                  "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION) become the pods' environment.")
    service_account: ObjectName | None = Field(None, description="Service account of the training pods.")
    image_pull_secret: ObjectName | None = Field(None, description="imagePullSecrets entry for a private registry.")
    node_selector: dict[Text, Text] = Field(default_factory=dict, description="nodeSelector of the pods.")
    timeout_s: int = Field(7 * 24 * 3600, ge=1, description="kubectl wait timeout for the Job to finish.")
    ttl_s: int = Field(3 * 24 * 3600, ge=0, description="ttlSecondsAfterFinished of the Job (its pods' logs stay this long).")
    kubectl: Text = Field("kubectl", description="kubectl executable.")
    context: Text | None = Field(None, description="kubectl --context (None: the current one / in-cluster config).")


LauncherConfig = Annotated[Union[LocalLauncherConfig, SlurmLauncherConfig, KubernetesLauncherConfig],
                           Field(discriminator="kind")]
"""Where the ranks of a job run: `local` (torchrun subprocess, default), `slurm` (sbatch) or `kubernetes` (Job)."""

LAUNCHER_HELP = ("Where the ranks run (training, evaluation and scoring alike): local torchrun (default; nproc "
                 "ranks), a Slurm allocation or a Kubernetes Job.")


class RanksConfig(BaseModel):
    """Where the ranks of a command's job start (the launcher section of a command line, `--launcher ...`)."""

    model_config = ConfigDict(extra="forbid")

    launcher: LauncherConfig = Field(default_factory=LocalLauncherConfig, description=LAUNCHER_HELP)


def launcher_config(data: dict | None = None) -> LocalLauncherConfig | SlurmLauncherConfig | KubernetesLauncherConfig:
    """The launcher config a dict (as a flow parameter arrives; ``kind`` picks the launcher) describes."""
    return TypeAdapter(LauncherConfig).validate_python(data or {"kind": "local"})
