#!/usr/bin/env bash
# Set up a fresh machine: etcd (for the tests and etcd:// jobs), the Debian packages the tests
# drive (Chromium, Prometheus), and a venv with elasticps.
# Safe to run again: every step checks what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
# etcd for the tests and etcd:// jobs; iproute2 (`ip netns`) for the network-partition test;
# Debian's Chromium and its driver for the status page's browser test (Selenium drives them);
# Debian's Prometheus (prometheus, promtool) for the shipped rules' and dashboard's tests.
missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
prometheus_missing=false
command -v promtool >/dev/null 2>&1 || prometheus_missing=true
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
if [ ${#missing[@]} -gt 0 ] || $prometheus_missing; then
  $sudo apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# etcd-server's package may start a system etcd on :2379; our tests use their own ports.
if $prometheus_missing; then
  # Without its recommended node exporter (a second daemon, on :9100). The package starts a
  # system Prometheus on :9090 (scraping itself every 15 s) wherever services may start; the
  # tests run their own on free ports, so it is stopped and kept from starting at boot.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus >/dev/null
  if [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  else
    $sudo invoke-rc.d prometheus stop >/dev/null 2>&1 || true
    $sudo update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned, so no resolver step can reach for a CUDA build; everything else at
# the versions the suite passed with (constraints.txt), so a new machine gets the same numpy.
.venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0" numpy
# The object-store extras too: the image has them, so the tests run with them.
.venv/bin/python -m pip install -q -c constraints.txt -e ".[dev,s3,gcs]"
echo "setup done: $(.venv/bin/elasticps --version) in .venv (etcd: $(etcd --version | head -1);" \
  "$(promtool --version 2>&1 | head -1))"
