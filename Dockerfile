# Naiad, CPU image. Build: docker build -t naiad:0.1.0 .
# Run:   docker run --rm -p 8000:8000 -p 8001:8001 -p 8002:8002 naiad:0.1.0
#        (serves the example repository baked in at /models; mount yours over it)
# The install steps live in deploy/docker/*.sh, which tests/test_deploy_image.py runs too.
# Expected size: about 270 MB uncompressed (deploy/README.md, "Images").
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- builder: compile the C++ core and build the wheel -----------------------------------
FROM ${PYTHON_IMAGE} AS builder
# libssl-dev: the core links OpenSSL for TLS (csrc/tls/); the runtime's Python already
# brings libssl3.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY tools/ tools/
COPY protos/ protos/
COPY csrc/ csrc/
COPY pysrc/ pysrc/
COPY deploy/docker/ deploy/docker/
RUN sh deploy/docker/build-wheel.sh /wheels

# -- runtime: the wheel and its dependencies in /opt/naiad, no compiler -------------------
FROM ${PYTHON_IMAGE}
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/naiad/bin:$PATH
COPY --from=builder /wheels /wheels
COPY deploy/docker/install.sh /tmp/install.sh
# The openai extra: tokenizers for the example tiny_llm and the OpenAI-compatible frontend.
RUN NAIAD_PREFIX=/opt/naiad NAIAD_EXTRAS=openai sh /tmp/install.sh /wheels \
    && rm -rf /wheels /tmp/install.sh
# Non-root, uid 1000 as KServe's runtimes run (runAsUser: 1000).
RUN useradd --uid 1000 --user-group --create-home --shell /usr/sbin/nologin naiad
COPY --chown=1000:1000 model_repository/ /models/
USER 1000:1000
WORKDIR /home/naiad
# Triton's ports: HTTP/REST, gRPC (accepted, not served yet), Prometheus metrics.
EXPOSE 8000 8001 8002
ENTRYPOINT ["naiad", "serve"]
CMD ["--model-repository=/models"]
