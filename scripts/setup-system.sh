#!/usr/bin/env bash
# Installs and starts what sclate needs from the operating system, skipping
# what is already there: the Docker engine (Debian's docker.io), debootstrap
# (to make the local base image), a C compiler and make (libfaketime's thread-safe
# library for the sandbox image is compiled from source), cron, libfaketime and
# headless Chromium (the run viewer's browser test).
# Idempotent; run as root.
set -euo pipefail

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
[ -e /usr/include/stdio.h ] || need+=(libc6-dev)
# Tests use them: systemd-analyze (the unit verifies), objdump (the model's
# instructions are portable), chattr (a read-only directory even for root).
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v objdump >/dev/null 2>&1 || need+=(binutils)
command -v chattr >/dev/null 2>&1 || need+=(e2fsprogs)
# The run viewer's browser test drives Debian's headless Chromium over the DevTools
# protocol (tests/web): no chromedriver needed.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(libfaketime)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "sclate setup: missing system packages (${need[*]}) and not root: install them with apt-get, or run as root." >&2
    exit 1
  fi
  log "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

sock=/var/run/docker.sock
engine_up() { curl -fsS --max-time 2 --unix-socket "$sock" http://localhost/_ping >/dev/null 2>&1; }

if engine_up; then
  log "Docker engine: running"
else
  log "Docker engine: starting dockerd"
  mkdir -p /var/log
  # Detached from this shell so it outlives make; the engine is left running.
  setsid nohup dockerd >/var/log/sclate-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 120); do
    engine_up && break
    sleep 0.5
  done
  if ! engine_up; then
    echo "sclate setup: dockerd did not answer on $sock within 60 s; see /var/log/sclate-dockerd.log" >&2
    tail -n 20 /var/log/sclate-dockerd.log >&2 || true
    exit 1
  fi
  log "Docker engine: up"
fi
