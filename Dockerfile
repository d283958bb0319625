# syntax=docker/dockerfile:1
# One image for the three topodra DRA drivers: `topodra serve cpu|accelerator|nic`, plus the
# init-container step `topodra install-hooks` that copies the host-side CDI hooks out of the image.
#
# Privileges are not set here but per driver in the DaemonSets (deploy/base/<driver>.yaml), where
# each one's needs are written next to its securityContext. In short: cpu and accelerator run as
# root with every capability dropped (root only to own the sockets and files it creates in the
# kubelet's root-owned folders); nic is privileged (netlink moves of host interfaces need
# CAP_NET_ADMIN, entering and unmounting pinned network namespaces CAP_SYS_ADMIN, and the
# Bidirectional mount propagation of its state folder is only allowed for privileged
# containers). The image's default user is unprivileged, so `topodra inspect`/`slices`/`synth`
# run without root.

# The base is pinned to a Python patch release and a Debian release; for builds that must be
# byte-for-byte repeatable, pass the digest your registry resolves it to:
#   --build-arg PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# ---- builder: the topodra wheel and the wheels of its dependencies -----------------------------
FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
# Only what the wheel is built from (see .dockerignore): tests and tooling stay out of the image.
COPY pyproject.toml README.md constraints.txt ./
COPY common/ common/
COPY drivers/ drivers/
COPY proto/ proto/
# constraints.txt: the exact version of every dependency, direct or not (hack/lock-image-deps).
RUN pip wheel --no-cache-dir --constraint constraints.txt --wheel-dir /wheels .

# ---- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
# iproute2 (ip) and util-linux/mount (nsenter, umount): the NIC driver moves interfaces between
# namespaces and removes namespace pins with them. libudev1: pyudev's uevent monitor (rescans on
# hot-plug). pci.ids: product names for the accelerator driver's productName attribute.
# Versions are not pinned: Debian security updates replace them in place, and a pin would break
# the next build; the base image tag fixes the release.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 util-linux mount libudev1 pci.ids \
 && rm -rf /var/lib/apt/lists/*
COPY --from=builder /wheels /tmp/wheels
# --no-index: exactly the wheels the builder resolved, nothing fetched at this step.
# Bytecode for both ways the image runs Python: plain (commands such as `topodra inspect`) and
# -OO, which the DaemonSets ask for with PYTHONOPTIMIZE=2 (no docstrings in memory); the
# interpreter cannot write any at run time (read-only, PYTHONDONTWRITEBYTECODE).
RUN pip install --no-cache-dir --no-index --find-links=/tmp/wheels /tmp/wheels/topodra-*.whl \
 && rm -rf /tmp/wheels \
 && python -m compileall -q -o 0 -o 2 "$(python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')" \
 && topodra --help >/dev/null
# MALLOC_ARENA_MAX: glibc gives each thread that allocates its own malloc arena (up to 8 per
# CPU); two keep the drivers' gRPC and claim threads from growing the RSS under load (the
# DaemonSets set it too, for images built otherwise).
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MALLOC_ARENA_MAX=2
# 65532: the conventional "nonroot" id; the DaemonSets that need root say so themselves.
RUN useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin topodra
USER 65532:65532
ENTRYPOINT ["topodra"]
CMD ["--help"]
