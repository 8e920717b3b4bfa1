# opsloop's image for people with a registry: the same layout as `make image`
# (scripts/build-image, which needs no registry): Debian bookworm, Debian's Python 3.11,
# opsloop and its runtime extras (kubernetes, postgres, otel, mcp) in /opt/opsloop at
# requirements.lock's versions and hashes, byte-compiled, the user opsloop (10001:10001),
# `opsloop` as entrypoint and `serve` as command, /etc/opsloop as working directory.
# The one difference: this base (debian:bookworm-slim) keeps apt; scripts/build-image's
# root filesystem has no apt at all.
#
#   docker build -t opsloop:0.1.0 --build-arg VERSION=0.1.0 \
#       --build-arg REVISION=$(git rev-parse HEAD) --build-arg SOURCE=<repository URL> .

FROM debian:bookworm-slim AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv ca-certificates binutils \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml requirements.lock README.md ./
COPY scripts/build-image scripts/build-image
COPY bot bot
COPY tools tools
# The runtime subset of the lock (uv resolves it, constrained to the lock), opsloop's wheel,
# then the virtual environment: every archive checked against the lock's hashes, the
# extension modules' debug information stripped, byte-compiled.
RUN python3 -m venv /build \
 && /build/bin/pip install --no-cache-dir --quiet uv==0.13.9 \
 && /build/bin/python scripts/build-image requirements -o /tmp/runtime.txt \
 && /build/bin/pip wheel --no-cache-dir --quiet --no-deps --wheel-dir /tmp/wheels . \
 && python3 -m venv /opt/opsloop \
 && /opt/opsloop/bin/pip install --no-cache-dir --quiet --no-deps --require-hashes \
        -r /tmp/runtime.txt \
 && /opt/opsloop/bin/pip install --no-cache-dir --quiet --no-deps /tmp/wheels/opsloop-*.whl \
 && /opt/opsloop/bin/pip check \
 && find /opt/opsloop -name '*.so' -exec strip --strip-debug {} + \
 && /opt/opsloop/bin/pip uninstall --quiet --yes pip setuptools \
 && /opt/opsloop/bin/python -m compileall -q /opt/opsloop

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 ca-certificates libstdc++6 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
 && python3 -m compileall -q /usr/lib/python3.11 \
 && groupadd --gid 10001 opsloop \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin opsloop \
 && mkdir -p /etc/opsloop
COPY --from=build /opt/opsloop /opt/opsloop
ENV PATH=/opt/opsloop/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    VIRTUAL_ENV=/opt/opsloop \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /etc/opsloop
USER 10001:10001
EXPOSE 3000
STOPSIGNAL SIGTERM
ENTRYPOINT ["opsloop"]
CMD ["serve"]
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="opsloop" \
      org.opencontainers.image.description="A Slack chat-ops bot that runs an autonomous, approval-gated agent loop." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.created="${CREATED}"
