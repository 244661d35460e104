# syntax=docker/dockerfile:1
# specwatch image: build a wheel, install it with its locked dependencies into a slim Python 3.12 base,
# run as UID 65534. Reproducible inputs:
# - the dependencies come from requirements.lock: exact versions and sha256 hashes, wheels only
#   (pip --require-hashes refuses anything else), installed offline from what the build stage fetched;
# - the base is pinned to an exact patch release here, and by digest at release time: no registry is
#   reachable where this file is tested, so the digest is not written here (an invented one would
#   only break the build). The release pipeline resolves it once and builds with, e.g.,
#     digest=$(docker buildx imagetools inspect python:3.12.12-slim-bookworm --format '{{json .Manifest.Digest}}' | tr -d '"')
#     sed -i "s|python:3.12.12-slim-bookworm|&@$digest|" Dockerfile   # every FROM: tag@sha256:...
#   and commits that change with the release tag (docs/kubernetes.md, "The residual risk: the image").
# - pip is removed from the runtime image after the install (and ensurepip, which bundles it).

# ---- stage 1: build the wheel, fetch the locked dependencies ------------------------------------
FROM python:3.12.12-slim-bookworm AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# pyproject.toml names README.md as the package readme, so the build needs it.
COPY requirements.lock pyproject.toml README.md ./
COPY exporter/ ./exporter/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && pip download --no-cache-dir --no-deps --only-binary=:all: --require-hashes \
       -r requirements.lock --dest /wheels \
    && cp requirements.lock /wheels/requirements.lock

# ---- stage 2: runtime --------------------------------------------------------------------------
FROM python:3.12.12-slim-bookworm
LABEL org.opencontainers.image.title="specwatch" \
      org.opencontainers.image.description="Observability sidecar for vLLM speculative decoding" \
      org.opencontainers.image.licenses="Apache-2.0"
# No .pyc writes and unbuffered logs: the root filesystem is read-only at run time (only /tmp is a tmpfs).
# PROMETHEUS_MULTIPROC_DIR is deliberately never set: prometheus_client switches to multiprocess mode
# when the variable merely exists, so it must not be inherited from vLLM's environment either.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Offline (--no-index): only the hashed wheels of the lock, then specwatch's own wheel without
# resolving anything further; `pip check` proves the lock satisfies the package's requirements.
# Then pip goes: the runtime needs none, and a read-only root could not use it anyway.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels --only-binary=:all: --require-hashes \
        -r /wheels/requirements.lock \
    && pip install --no-cache-dir --no-index --no-deps /wheels/specwatch-*.whl \
    && pip check \
    && python -c "import specwatch" \
    && site="$(python -c 'import os, pip; print(os.path.dirname(os.path.dirname(pip.__file__)))')" \
    && stdlib="$(python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')" \
    && rm -rf "$site"/pip "$site"/pip-*.dist-info "$stdlib"/ensurepip \
        /usr/local/bin/pip /usr/local/bin/pip3 /usr/local/bin/pip3.* \
    && if python -c "import pip" 2>/dev/null; then echo "pip is still importable" >&2; exit 1; fi
USER 65534:65534
WORKDIR /tmp
EXPOSE 9474
ENTRYPOINT ["specwatch"]
CMD ["run"]
