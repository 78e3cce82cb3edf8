# syntax=docker/dockerfile:1
# dlrmflow, CPU image: the Prefect worker / `dlrmflow serve` container of compose.yaml, CPU training
# (gloo), and the flow-run pod that only submits GPU Jobs (launcher kind kubernetes or slurm).
# The same steps as infra/install.sh: uv, the `cpu` extra (torch CPU wheel, fbgemm-gpu-cpu, torchrec
# without its CUDA fbgemm-gpu dependency via infra/uv-excludes.txt).
#   docker build -f infra/docker/cpu.Dockerfile -t dlrmflow-cpu:0.1.0 .
# Pin the base by digest for reproducible builds: python:3.11-slim-bookworm@sha256:<digest>
# (docker buildx imagetools inspect python:3.11-slim-bookworm).
FROM python:3.11-slim-bookworm

ARG UV_VERSION=0.13.9
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG KUBECTL_VERSION=v1.33.1

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_NO_CACHE=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    DLRMFLOW_INFRA_DIR=/opt/dlrmflow/infra

# kubectl (the Kubernetes launcher applies and waits for training Jobs), checksum-verified
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates && \
    curl -fsSLo /usr/local/bin/kubectl "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/amd64/kubectl" && \
    echo "$(curl -fsSL https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/amd64/kubectl.sha256)  /usr/local/bin/kubectl" | sha256sum -c - && \
    chmod +x /usr/local/bin/kubectl && \
    apt-get purge -y curl && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*

RUN pip install "uv==${UV_VERSION}"

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

# torch's CPU wheel from the PyTorch CPU index (a same-version CUDA wheel on PyPI loses), no fbgemm-gpu
RUN uv pip install --system --excludes infra/uv-excludes.txt \
        --extra-index-url "${TORCH_INDEX}" --index-strategy unsafe-best-match \
        ".[cpu]" && \
    python -c "import torch, fbgemm_gpu, torchrec, prefect; assert torch.version.cuda is None; print('torch', torch.__version__, 'prefect', prefect.__version__)"

RUN useradd --create-home --uid 1000 dlrmflow
USER dlrmflow
WORKDIR /home/dlrmflow
ENTRYPOINT []
CMD ["dlrmflow", "--help"]
