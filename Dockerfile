# syntax=docker/dockerfile:1
# The elasticps image: master, pservers and trainers all run it (docs/cluster.md).
#
#   docker build -t elasticps/elasticps:0.1.0 .                                  # CPU torch
#   docker build --build-arg TORCH_VARIANT=cu126 -t elasticps/elasticps:0.1.0-cu126 .  # CUDA
#
# TORCH_VARIANT names a PyTorch wheel index (cpu, cu126, cu128, ...): the CUDA wheels bring
# their own CUDA libraries, so the same slim base serves both and only the node's driver is
# needed (the NVIDIA device plugin mounts it). The user's script is either baked in (COPY it
# into /workspace in an image FROM this one) or shipped by `elasticps submit` with `code: DIR`.

# The base by digest (Python 3.11.16 on Debian bookworm, the multi-platform index), so a build
# next year starts from the same bytes. To move it: docker buildx imagetools inspect
# python:3.11-slim-bookworm, and put the index's Digest here.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

# -- build: a virtual environment with torch and elasticps, nothing else --------------------
FROM ${PYTHON_IMAGE} AS build
ARG TORCH_VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/elasticps
ENV PATH=/opt/elasticps/bin:$PATH
WORKDIR /src
# Every dependency but torch at the version the test suite passed with, each file checked
# against its sha256 (requirements.lock, made from constraints.txt by scripts/lock.sh): the
# object-store extras (s3fs, gcsfs), torch's own dependencies, and the wheel's build tools.
# torch then comes from its own index, pinned; its dependencies are already there.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock \
    && pip install --index-url "https://download.pytorch.org/whl/${TORCH_VARIANT}" \
        "torch==${TORCH_VERSION}"
COPY pyproject.toml README.md ./
COPY elasticps ./elasticps
# elasticps itself, built with the locked setuptools and installed without a resolver step.
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
    && pip install --no-deps /wheels/elasticps-*.whl \
    && pip check \
    && find /opt/elasticps -name __pycache__ -type d -prune -exec rm -rf {} +

# -- run: the venv on a clean base, as an unprivileged user ----------------------------------
FROM ${PYTHON_IMAGE}
ARG TORCH_VARIANT=cpu
LABEL org.opencontainers.image.title="elasticps" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.description="Elastic, fault-tolerant parameter-server training for PyTorch" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.elasticps.torch-variant="${TORCH_VARIANT}"
COPY --from=build /opt/elasticps /opt/elasticps
ENV PATH=/opt/elasticps/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
RUN useradd --create-home --uid 10001 elasticps
WORKDIR /workspace
# The demos, so `entry_point: python examples/ctr/train.py` runs from the stock image.
COPY --chown=10001:10001 examples ./examples
USER 10001
ENTRYPOINT ["elasticps"]
CMD ["--help"]
