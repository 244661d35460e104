# syntax=docker/dockerfile:1
# specwatch image: build a wheel, install it into a slim Python 3.12 base, run as UID 65534.
# The base is pinned to an exact patch release; pin the digest too (tag@sha256:...) once it has been
# looked up in the registry you build against.

# ---- stage 1: build the wheel ------------------------------------------------------------------
FROM python:3.12.12-slim-bookworm AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# pyproject.toml names README.md as the package readme, so the build needs it.
COPY pyproject.toml README.md ./
COPY exporter/ ./exporter/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

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
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir /wheels/*.whl \
    && python -c "import specwatch"
USER 65534:65534
WORKDIR /tmp
EXPOSE 9474
ENTRYPOINT ["specwatch"]
CMD ["run"]
