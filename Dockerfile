# GPU worker image for the paper profile: CUDA, torch, verl, SGLang, faiss-gpu, and this
# pipeline. A Prefect worker in this image serves the `gpu` work pool:
#   docker build -t maopd-gpu . && docker run --gpus all maopd-gpu prefect worker start --pool gpu
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    DVC_NO_ANALYTICS=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    MLFLOW_DISABLE_TELEMETRY=true \
    GX_ANALYTICS_ENABLED=false

# Distribution packages follow the base image's point release, so they are not pinned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev git build-essential \
    && rm -rf /var/lib/apt/lists/*

RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /workspace
COPY requirements.txt constraints.txt pyproject.toml ./
# The CUDA builds replace the CPU pins of the lock: torch for CUDA 12.8, SGLang for rollouts,
# faiss-gpu for the 21M-passage index, TransferQueue for verl's V1 trainer (several samples per agent-loop run).
RUN pip install --upgrade pip==26.0.1 \
    && pip install torch==2.9.1 --index-url https://download.pytorch.org/whl/cu128 \
    && grep -v -e '^faiss-cpu' -e '^torch' requirements.txt > requirements-gpu.txt \
    && pip install -r requirements-gpu.txt \
    && pip install "sglang[srt]==0.5.5" faiss-gpu-cu12==1.12.0 TransferQueue==0.1.11

COPY . .
RUN pip install --no-deps -e .

CMD ["prefect", "worker", "start", "--pool", "gpu"]
