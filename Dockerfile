# syntax=docker/dockerfile:1
# The operator image: docker build -t REGISTRY/inferplan:0.1.0 .   (the Helm chart's image.repository and tag)
#
# Stage 1 installs the project into a virtual environment exactly as the project installs itself (pip install of
# this source tree: dependencies from pyproject.toml, the catalogs as package data); stage 2 is the same slim
# base with only that environment and a non-root user. The base is pinned to an exact Python patch release on
# Debian bookworm (pin a digest too, python:...@sha256:..., where your registry policy asks for it), the Python
# version the project is tested with.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/inferplan
WORKDIR /src
# README.md is the package's long description (pyproject.toml: readme); .dockerignore keeps the context to these.
COPY pyproject.toml README.md ./
COPY inferplan ./inferplan
RUN /opt/inferplan/bin/pip install . \
 && /opt/inferplan/bin/inferplan crd > /dev/null

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 inferplan \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin inferplan
COPY --from=build /opt/inferplan /opt/inferplan
# Bytecode was compiled at install time; the root filesystem is read-only in the pod (/tmp is an emptyDir).
ENV PATH=/opt/inferplan/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# Numeric, so that Kubernetes' runAsNonRoot can check it (the chart's podSecurityContext uses the same ids).
USER 10001:10001
# /metrics (INFERPLAN_METRICS_PORT) and /healthz (INFERPLAN_HEALTH_PORT)
EXPOSE 8080 8081
ENTRYPOINT ["inferplan", "operator"]
