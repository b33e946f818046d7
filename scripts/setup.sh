#!/bin/sh
# Installs every Debian package bf needs (only the missing ones) and builds
# bf into ./build. Idempotent: a second run only rebuilds what changed.
set -eu
cd "$(dirname "$0")/.."

PKGS="build-essential cmake pkg-config clang-format libopenblas-openmp-dev libopenmpi-dev openmpi-bin
libzmq3-dev libsodium-dev libyaml-dev libcriterion-dev libsqlite3-dev libjansson-dev
libsentencepiece-dev zlib1g-dev wordnet-base bible-kjv dataset-fashion-mnist python3-zmq
python3-numpy python3-pip python3-torch
slurm-wlm munge nftables iproute2 libcairo2-dev libmicrohttpd-dev clang libclang-rt-14-dev libomp-dev
libdnnl-dev libjs-dygraphs libjs-d3 chromium chromium-driver python3-selenium python3-pandas openssl curl"

missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "setup: installing$missing" >&2
    $SUDO apt-get update
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y $missing
fi

# CUDA is compiled whenever the toolkit is present (it also lives in /usr/local/cuda).
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
echo "setup: built into ./build" >&2

# Python's safetensors (the reference implementation; not packaged by Debian)
# for test_it_safetensors, from PyPI into build/pydeps, never system-wide.
if ! PYTHONPATH=build/pydeps /usr/bin/python3 -c 'import safetensors.numpy' 2>/dev/null; then
    echo "setup: pip-installing safetensors into build/pydeps" >&2
    /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target build/pydeps \
        'safetensors>=0.4,<1' ||
        echo "setup: could not install safetensors (test_it_safetensors will fail)" >&2
fi

# The Python packages the tests play outside parties with (TensorBoard's event
# reader, Prometheus' text parser), from PyPI into build/pydeps (tests put it
# on PYTHONPATH); the system Python stays as Debian left it.
if ! PYTHONPATH=build/pydeps /usr/bin/python3 -c 'import tensorboard, prometheus_client' \
    >/dev/null 2>&1; then
    echo "setup: pip-installing tensorboard, prometheus_client into build/pydeps" >&2
    /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
        --target build/pydeps tensorboard prometheus_client
fi
