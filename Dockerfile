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

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: a virtual environment with torch and elasticps, nothing else --------------------
FROM ${PYTHON_IMAGE} AS build
ARG TORCH_VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/elasticps
ENV PATH=/opt/elasticps/bin:$PATH
# torch first, from its own index, so no resolver step can reach for another build of it.
RUN pip install --index-url "https://download.pytorch.org/whl/${TORCH_VARIANT}" \
        "torch==${TORCH_VERSION}"
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY elasticps ./elasticps
# The dependencies at the versions the test suite passed with (constraints.txt).
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && pip install -c constraints.txt /wheels/elasticps-*.whl \
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
