# syntax=docker/dockerfile:1
# DRA Extender image: `dra-extender serve` as a non-root user on a slim Python base.
#   docker build -t dra-extender:0.1.0 .        (`make dist` builds and checks it where a builder exists)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The version pyproject.toml declares; the build fails if the installed package reports another, so the
# image's tag, its label and `dra-extender --version` inside it cannot disagree.
ARG VERSION=0.1.0

# ---- build: install the package and its `fast` extra (cel-expr-python, uvloop) into a virtualenv ---
FROM ${PYTHON_IMAGE} AS build
ARG VERSION
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
# Only what the package build reads (see .dockerignore): metadata first, then the four packages.
COPY pyproject.toml README.md ./
COPY allocator/ allocator/
COPY common/ common/
COPY extender/ extender/
COPY webhook/ webhook/
# A regular (not editable) install: the runtime stage gets no source tree. pip byte-compiles the
# installed modules, which matters because the container's root filesystem is read-only.
RUN /opt/venv/bin/pip install ".[fast]" \
    && /opt/venv/bin/dra-extender --version \
    && /opt/venv/bin/dra-extender --version | grep -q "^dra-extender ${VERSION} "

# ---- runtime: the virtualenv on the same base, nothing else ------------------------------------------
FROM ${PYTHON_IMAGE}
ARG VERSION
LABEL org.opencontainers.image.title="dra-extender" \
      org.opencontainers.image.description="Kubernetes DRA scheduling from outside kube-scheduler: scheduler extender, admission webhook and allocator" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/dra-extender/dra-extender"
# The numeric user the Kubernetes manifests run as (runAsUser: 65532).
RUN groupadd --system --gid 65532 dra-extender \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin dra-extender
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# extender verbs, debug/metrics/health, admission webhook (TLS)
EXPOSE 8888 8889 8443
ENTRYPOINT ["dra-extender", "serve"]
# Without flags: in-cluster credentials; the manifests in deploy/ pass the ports, TLS files and logging.
CMD []
