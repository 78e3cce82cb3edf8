# syntax=docker/dockerfile:1
# dlrmflow, ROCm image: training on AMD Instinct MI300X / MI325X / MI355X (8 GPUs per node, RCCL).
#   docker build -f infra/docker/rocm.Dockerfile -t REGISTRY/dlrmflow-rocm:0.1.0 .
#
# Base: AMD's PyTorch training image (ROCm user space, RCCL, rocm-smi, the NIC plugins AMD tests with).
# Pin it by digest in production -- replace the tag with rocm/primus:v26.1@sha256:<digest>, from
#   docker buildx imagetools inspect rocm/primus:v26.1
ARG BASE_IMAGE=rocm/primus:v26.1
FROM ${BASE_IMAGE}

# The torch stack: the SAME versions as pyproject.toml's `cpu` extra, as ROCm builds from the
# PyTorch ROCm index. dlrmflow needs Python 3.11 (requires-python), which the base image's own
# Python/torch may not be, so they go into their own uv-managed 3.11 environment (/opt/venv).
# Check what the base image ships (to pick ROCM_INDEX):
#   docker run --rm rocm/primus:v26.1 python -c "import torch; print(torch.__version__, torch.version.hip)"
# and that the index has the wheels for these versions:
#   pip download --no-deps -d /tmp/w --index-url https://download.pytorch.org/whl/rocm7.1 torch==2.13.0 fbgemm-gpu==1.8.0
# ROCm >= 7.1 is required for MI355X (gfx950): older wheels fail with hipErrorNoBinaryForGpu.
ARG ROCM_INDEX=https://download.pytorch.org/whl/rocm7.1
ARG PYTHON_VERSION=3.11
ARG TORCH_VERSION=2.13.0
ARG FBGEMM_GPU_VERSION=1.8.0
ARG TORCHREC_VERSION=1.8.0
ARG UV_VERSION=0.13.9
ARG KUBECTL_VERSION=v1.33.1

ENV PYTHONUNBUFFERED=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_NO_CACHE=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    DLRMFLOW_INFRA_DIR=/opt/dlrmflow/infra

# kubectl for the Kubernetes launcher (a flow-run pod submits the multi-node training Job), checksum-verified
RUN curl -fsSLo /usr/local/bin/kubectl "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/amd64/kubectl" && \
    echo "$(curl -fsSL https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/amd64/kubectl.sha256)  /usr/local/bin/kubectl" | sha256sum -c - && \
    chmod +x /usr/local/bin/kubectl

RUN python3 -m pip install --no-cache-dir "uv==${UV_VERSION}" && \
    uv venv --python "${PYTHON_VERSION}" /opt/venv

# ROCm torch + fbgemm-gpu from the ROCm index; torchrec is pure Python, installed without deps (its
# declared fbgemm-gpu dependency would pull the CUDA build over the ROCm one)
RUN uv pip install --index-url "${ROCM_INDEX}" "torch==${TORCH_VERSION}" "fbgemm-gpu==${FBGEMM_GPU_VERSION}" && \
    uv pip install --no-deps "torchrec==${TORCHREC_VERSION}" && \
    python -c "import torch, fbgemm_gpu, torchrec; assert torch.version.hip, 'not a ROCm build of torch'; print('torch', torch.__version__, 'hip', torch.version.hip)"

WORKDIR /opt/dlrmflow
COPY pyproject.toml README.md ./
COPY common ./common
COPY feature_spec ./feature_spec
COPY preprocessing ./preprocessing
COPY synthetic ./synthetic
COPY training ./training
COPY models ./models
COPY nightly ./nightly
COPY tuning ./tuning
COPY flows ./flows
COPY infra ./infra
COPY examples ./examples

# this project and its non-torch dependencies (pyproject's `dependencies`, i.e. `.` without the `cpu`
# extra), with the ROCm torch stack above held in place by a constraints file
RUN uv pip freeze | grep -iE '^(torch|fbgemm-gpu|torchrec)==' > /tmp/rocm-stack.txt && \
    uv pip install --constraints /tmp/rocm-stack.txt --excludes infra/uv-excludes.txt . && \
    python -c "import torch, torchrec, prefect, flows.cli; assert torch.version.hip; print('dlrmflow ok: torch', torch.__version__, 'prefect', prefect.__version__)" && \
    rm /tmp/rocm-stack.txt

CMD ["dlrmflow", "--help"]
