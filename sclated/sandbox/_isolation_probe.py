"""The attempts made from inside a sandbox, each expected to fail (see ``_isolation``).

Standard library only: the isolation suite runs this file's source under the
sandbox image's ``python3`` (``python3 -c SOURCE CONFIG_JSON``). It prints one
JSON object: for each probe it ran, the attempts made, what each one got and
whether it got through (a breach). Nothing here decides what a sandbox is
allowed to do beyond the configuration it is given; the host side judges.

Attempts never harm the machine when they succeed (which they do in a weakened
sandbox, and on the bare host): a kernel setting is written back with the value
it holds, a trigger file is only opened, the clock probe sets only the time zone
to the one the kernel already has, and every exhausting attempt stops at a bound
of its own just past the limit it tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Attempt = dict[str, Any]

# settimeofday's syscall number: syscall() is not interposed by libfaketime.
_SETTIMEOFDAY = {"x86_64": 164, "aarch64": 170}
_MIB = 1 << 20


def _err(exc: BaseException) -> str:
    if isinstance(exc, socket.gaierror):
        return f"name not resolved ({exc.strerror})"
    if isinstance(exc, OSError) and exc.errno:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return f"{type(exc).__name__}: {exc}"[:120]


def attempt(what: str, outcome: str, breach: bool) -> Attempt:
    return {"what": what, "outcome": outcome, "breach": bool(breach)}


def tcp(host: str, port: int, token: str, timeout: float) -> Attempt:
    """Connect; with ``token``, a breach only when the host's listener answers with it."""
    what = f"tcp {host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            try:
                data = conn.recv(128)
            except OSError:
                data = b""
    except OSError as exc:
        return attempt(what, _err(exc), False)
    if not token:
        return attempt(what, "connected", True)
    if token.encode() in data:
        return attempt(what, "reached the host's listener", True)
    return attempt(what, f"connected to something else ({data[:24]!r})", False)


def unix(path: str, token: str, timeout: float) -> Attempt:
    what = f"unix {path}"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(path)
            if not token:
                return attempt(what, "connected", True)
            try:
                data = conn.recv(128)
            except OSError:
                data = b""
    except OSError as exc:
        return attempt(what, _err(exc), False)
    if token.encode() in data:
        return attempt(what, "reached the listener", True)
    return attempt(what, f"connected, no token ({data[:24]!r})", False)


def _parallel(calls: list[tuple[Any, ...]]) -> list[Attempt]:
    if not calls:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(calls))) as pool:
        return list(pool.map(lambda c: c[0](*c[1:]), calls))


# ---------------------------------------------------------------------------------- network


def mounts() -> list[dict[str, str]]:
    """/proc/self/mountinfo: each mount's root (its path in its source), target, type."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            head, _, tail = line.partition(" - ")
            fields, rest = head.split(), tail.split()
            if len(fields) >= 5 and rest:
                found.append({"root": fields[3], "target": fields[4], "type": rest[0], "options": fields[5]})
    return found


_VIRTUAL = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "overlay", "devtmpfs"}


def host_mounts() -> list[dict[str, str]]:
    """Mounts that may come from the host: not the container's own root, /proc, /sys, /dev, /dev/shm."""
    return [
        m for m in mounts() if m["type"] not in _VIRTUAL and not (m["type"] in ("tmpfs", "shm") and m["root"] == "/")
    ]


def mounted_sockets(limit: int = 5000) -> list[str]:
    """Unix sockets under the mounts that come from the host (bind mounts), bounded."""
    found, seen = [], 0
    for m in host_mounts():
        if not os.path.isdir(m["target"]):
            continue
        for dirpath, dirnames, filenames in os.walk(m["target"]):
            for name in dirnames + filenames:
                seen += 1
                path = os.path.join(dirpath, name)
                try:
                    if stat.S_ISSOCK(os.lstat(path).st_mode):
                        found.append(path)
                except OSError:
                    pass
            if seen > limit:
                return found
    return found


def probe_docker_socket(cfg: dict[str, Any]) -> list[Attempt]:
    paths = ["/var/run/docker.sock", "/run/docker.sock"]
    allowed = set(cfg.get("allowed_sockets", []))
    paths += [p for p in mounted_sockets() if p not in allowed and p not in paths]
    calls: list[tuple[Any, ...]] = [(unix, p, "", 1.0) for p in paths]
    calls += [(tcp, h, port, "", 1.5) for h in cfg.get("host_addresses", []) for port in (2375, 2376)]
    return _parallel(calls)


def probe_listeners(cfg: dict[str, Any], key: str) -> list[Attempt]:
    targets = cfg.get(key, [])
    return _parallel([(tcp, t["host"], t["port"], t["token"], 1.5) for t in targets])


def probe_other_sandbox(cfg: dict[str, Any]) -> list[Attempt]:
    other = cfg.get("other", {})
    calls: list[tuple[Any, ...]] = [
        (tcp, host, other["port"], other["token"], 1.5) for host in ["127.0.0.1", *other.get("addresses", [])]
    ]
    out = _parallel(calls)
    for path in other.get("sockets", []):
        out.append(unix(path, "", 1.0) if os.path.exists(path) else attempt(f"unix {path}", "ENOENT", False))
    return out


def probe_outside(cfg: dict[str, Any]) -> list[Attempt]:
    out = _parallel([(tcp, t["host"], t["port"], "", 2.0) for t in cfg.get("outside", [])])
    for name in cfg.get("names", []):
        try:
            addrs = sorted({str(a[4][0]) for a in socket.getaddrinfo(name, 443, proto=socket.IPPROTO_TCP)})
            out.append(attempt(f"resolve {name}", f"resolved to {', '.join(addrs[:3])}", True))
        except OSError as exc:
            out.append(attempt(f"resolve {name}", _err(exc), False))
    # A DNS query by hand (UDP), in case the resolver library is configured oddly.
    query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04pypi\x03org\x00\x00\x01\x00\x01"
    for server in cfg.get("nameservers", []):
        what = f"udp dns {server}:53"
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(1.0)
                s.sendto(query, (server, 53))
                s.recvfrom(512)
            out.append(attempt(what, "answered", True))
        except OSError as exc:
            out.append(attempt(what, _err(exc), False))
    return out


def probe_model_path(cfg: dict[str, Any]) -> list[Attempt]:
    """The one path that must work (a breach here means: NOT reachable)."""
    got = unix(cfg["model_socket"], cfg["model_token"], 3.0)
    reached = got["breach"]
    return [attempt(got["what"], got["outcome"], not reached)]


# ------------------------------------------------------------------------------- filesystem


def write_same(path: str) -> Attempt:
    """Write a file's own content back to it: a breach that changes nothing."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(4096)
    except OSError as exc:
        return attempt(f"write {path}", f"unreadable: {_err(exc)}", False)
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        return attempt(f"write {path}", _err(exc), False)
    try:
        os.write(fd, data or b"\n")
        return attempt(f"write {path}", "written", True)
    except OSError as exc:
        return attempt(f"write {path}", f"opened for writing, write refused: {_err(exc)}", True)
    finally:
        os.close(fd)


def open_for_write(path: str) -> Attempt:
    """For trigger files a write would act on: opening for writing is the breach."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        return attempt(f"open {path} for writing", _err(exc), False)
    os.close(fd)
    return attempt(f"open {path} for writing", "opened", True)


def create(path: str) -> Attempt:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return attempt(f"create {path}", _err(exc), False)
    os.close(fd)
    os.unlink(path)
    return attempt(f"create {path}", "created", True)


def cgroup_files() -> list[str]:
    candidates = [
        "/sys/fs/cgroup/pids/pids.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "/sys/fs/cgroup/pids.max",
        "/sys/fs/cgroup/memory.max",
    ]
    return [p for p in candidates if os.path.exists(p)]


def probe_control_dir(cfg: dict[str, Any]) -> list[Attempt]:
    own = cfg["control_dir"]
    return [write_same(f"{own}/time/faketime.rc"), create(f"{own}/sclate-probe"), create(f"{own}/time/sclate-probe")]


def probe_kernel_settings(cfg: dict[str, Any]) -> list[Attempt]:
    out = [
        write_same("/proc/sys/kernel/core_pattern"),
        write_same("/proc/sys/kernel/modprobe"),
        write_same("/proc/sys/net/ipv4/ip_forward"),
        open_for_write("/proc/sysrq-trigger"),
        open_for_write("/sys/kernel/uevent_helper") if os.path.exists("/sys/kernel/uevent_helper") else None,
        create("/sys/sclate-probe"),
        *[write_same(p) for p in cgroup_files()],
    ]
    return [a for a in out if a is not None]


def probe_host_files(cfg: dict[str, Any]) -> list[Attempt]:
    out = []
    for path in cfg.get("host_paths", []):
        out.append(
            attempt(f"see {path}", "visible", True) if os.path.exists(path) else attempt(f"see {path}", "ENOENT", False)
        )
    target = cfg.get("host_write")
    if target:
        try:
            with open(target, "w") as fh:
                fh.write("sclate isolation probe\n")
            # Written somewhere: the host side checks whether it landed on the host.
            out.append(attempt(f"write {target}", "written (inside)", False))
        except OSError as exc:
            out.append(attempt(f"write {target}", _err(exc), False))
    dev = cfg.get("host_root_device")
    if dev:
        node = "/tmp/.sclate-probe-blk"
        try:
            os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(dev[0], dev[1]))
        except OSError as exc:
            out.append(attempt(f"mknod block device {dev[0]}:{dev[1]}", _err(exc), False))
        else:
            try:
                with open(node, "rb") as fh:
                    fh.read(512)
                out.append(attempt(f"read block device {dev[0]}:{dev[1]}", "read the host's disk", True))
            except OSError as exc:
                # Refused by the device cgroup, but CAP_MKNOD was there: a breach all the same.
                out.append(attempt(f"mknod block device {dev[0]}:{dev[1]}", f"node made, read {_err(exc)}", True))
            finally:
                os.unlink(node)
    return out


def probe_other_control_dir(cfg: dict[str, Any]) -> list[Attempt]:
    """Another run's control directory is neither at its host path nor under any mount of a
    host directory that contains it (``fs_path``: its path within its own file system, as
    /proc/self/mountinfo names a mount's root)."""
    out = []
    found = host_mounts()
    for other in cfg.get("other", {}).get("control_dirs", []):
        path, fs_path = other["host_path"], other["fs_path"]
        out.append(
            attempt(f"see {path}", "visible", True) if os.path.exists(path) else attempt(f"see {path}", "ENOENT", False)
        )
        for m in found:
            root = m["root"].rstrip("/")  # "" for a mount of a file system's top (a host's /)
            if not (fs_path == root or fs_path.startswith(root + "/")):
                continue
            inside = m["target"].rstrip("/") + fs_path[len(root) :]
            seen = os.path.exists(inside)
            out.append(attempt(f"see {path} through the mount at {m['target']}", "visible" if seen else "ENOENT", seen))
    return out


# ------------------------------------------------------------------------------- privileges


def status_fields() -> dict[str, str]:
    fields = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def probe_capabilities(cfg: dict[str, Any]) -> list[Attempt]:
    fields = status_fields()
    out = []
    for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
        value = fields.get(key, "?")
        out.append(attempt(key, value, value != "0000000000000000"))
    nnp = fields.get("NoNewPrivs", "?")
    out.append(attempt("NoNewPrivs", nnp, nnp != "1"))
    seccomp = fields.get("Seccomp", "?")
    out.append(attempt("Seccomp (2: filtered)", seccomp, seccomp != "2"))
    return out


SUID_COPY = "/tmp/.sclate-probe-suid-id"


def prepare_setuid(cfg: dict[str, Any]) -> list[Attempt]:
    """As root: a setuid-root copy of ``id``, for an unprivileged user to run (``setuid``)."""
    try:
        shutil.copy("/usr/bin/id", SUID_COPY)
        os.chmod(SUID_COPY, 0o4755)
        return [attempt("make a setuid-root copy of id", "made", False)]
    except OSError as exc:
        return [attempt("make a setuid-root copy of id", _err(exc), False)]


def probe_setuid(cfg: dict[str, Any]) -> list[Attempt]:
    """As an unprivileged user: run setuid-root programs; the effective uid must not change."""
    out = []
    uid = os.geteuid()
    if uid == 0:
        return [attempt("run as an unprivileged user", "still root: cannot test", True)]
    if os.path.exists(SUID_COPY):
        res = subprocess.run([SUID_COPY, "-u"], capture_output=True, text=True, timeout=10)
        euid = res.stdout.strip()
        out.append(attempt(f"{SUID_COPY} -u as uid {uid}", f"euid {euid or res.stderr.strip()[:60]}", euid == "0"))
    else:
        out.append(attempt(f"run {SUID_COPY}", "missing", True))
    return out


def _run(argv: list[str]) -> Attempt:
    what = " ".join(argv)
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return attempt(what, _err(exc), False)
    if res.returncode == 0:
        return attempt(what, "succeeded", True)
    return attempt(what, f"exit {res.returncode}: {(res.stderr.strip().splitlines() or [''])[0][:100]}", False)


def probe_namespaces(cfg: dict[str, Any]) -> list[Attempt]:
    out = [
        _run(["unshare", "--user", "--map-root-user", "true"]),
        _run(["unshare", "--mount", "true"]),
        _run(["unshare", "--net", "true"]),
    ]
    os.makedirs("/tmp/.sclate-probe-mnt", exist_ok=True)
    got = _run(["mount", "-t", "tmpfs", "none", "/tmp/.sclate-probe-mnt"])
    if got["breach"]:
        subprocess.run(["umount", "/tmp/.sclate-probe-mnt"], capture_output=True, timeout=10)
    out.append(got)
    return out


def probe_raw_sockets(cfg: dict[str, Any]) -> list[Attempt]:
    out = []
    kinds = [("AF_INET SOCK_RAW icmp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)]
    if hasattr(socket, "AF_PACKET"):
        kinds.append(("AF_PACKET SOCK_RAW", socket.AF_PACKET, socket.SOCK_RAW, 0))
    for what, family, kind, proto in kinds:
        try:
            socket.socket(family, kind, proto).close()
            out.append(attempt(f"open {what}", "opened", True))
        except OSError as exc:
            out.append(attempt(f"open {what}", _err(exc), False))
    return out


def probe_ownership(cfg: dict[str, Any]) -> list[Attempt]:
    path = "/tmp/.sclate-probe-owned"
    out = []
    try:
        with open(path, "w"):
            pass
        os.chown(path, 65534, 65534)
        out.append(attempt(f"chown {path} (root's) to 65534", "changed", True))
    except OSError as exc:
        out.append(attempt(f"chown {path} (root's) to 65534", _err(exc), False))
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return out


class _Timezone(ctypes.Structure):
    _fields_ = [("tz_minuteswest", ctypes.c_int), ("tz_dsttime", ctypes.c_int)]


def probe_clock(cfg: dict[str, Any]) -> list[Attempt]:
    """settimeofday needs CAP_SYS_TIME whatever it sets; only the zone (0, as the kernel has) is set."""
    import platform

    number = _SETTIMEOFDAY.get(platform.machine())
    if number is None:
        return [attempt("settimeofday", f"unknown syscall number on {platform.machine()}", True)]
    libc = ctypes.CDLL(None, use_errno=True)
    tz = _Timezone(0, 0)
    rc = libc.syscall(number, None, ctypes.byref(tz))
    if rc == 0:
        return [attempt("settimeofday (time zone only)", "allowed", True)]
    return [attempt("settimeofday (time zone only)", errno.errorcode.get(ctypes.get_errno(), "?"), False)]


# ------------------------------------------------------------------------------ exhaustion


def fork_bomb(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fork until refused (bounded just past the pids limit); hold, then release every child."""
    bound = int(cfg["pids"]) + 64
    hold_s = float(cfg.get("hold_s", 2.0))
    r, w = os.pipe()
    children, stopped = [], "loop bound"
    try:
        for _ in range(bound):
            pid = os.fork()
            if pid == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        stopped = _err(exc)
    print(json.dumps({"forks": len(children), "stopped_by": stopped}), flush=True)
    time.sleep(hold_s)
    os.close(w)
    for pid in children:
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
    return {"forks": len(children), "stopped_by": stopped}


def memory_hog(cfg: dict[str, Any]) -> dict[str, Any]:
    """Allocate and touch memory in 16 MiB steps up to the limit + 256 MiB; each step reported."""
    bound = int(cfg["memory_bytes"]) + 256 * _MIB
    held, total = [], 0
    while total < bound:
        held.append(bytearray(16 * _MIB))  # zero-filled: every page touched
        total += 16 * _MIB
        print(total, flush=True)
    return {"allocated": total, "survived": True}


def disk_fill(cfg: dict[str, Any]) -> dict[str, Any]:
    """Write (and fsync) 4 MiB chunks to the writable layer up to ``bytes``, printing progress;
    hold what was written for ``hold_s`` (for a disk watchdog to see and stop); then remove it."""
    path, bound = cfg.get("path", "/var/tmp/.sclate-probe-fill"), int(cfg["bytes"])
    hold_s = float(cfg.get("hold_s", 0))
    chunk, written, error = b"\0" * (4 * _MIB), 0, ""
    try:
        with open(path, "wb") as fh:
            while written < bound:
                fh.write(chunk)
                fh.flush()
                os.fsync(fh.fileno())
                written += len(chunk)
                print(json.dumps({"progress": written}), flush=True)
        time.sleep(hold_s)
    except OSError as exc:
        error = _err(exc)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return {"written": written, "error": error, "held_s": hold_s}


PROBES = {
    "model_path": probe_model_path,
    "docker_socket": probe_docker_socket,
    "host_loopback": lambda cfg: probe_listeners(cfg, "loopback"),
    "host_addresses": lambda cfg: probe_listeners(cfg, "host_listeners"),
    "other_sandbox": probe_other_sandbox,
    "outside": probe_outside,
    "control_dir_read_only": probe_control_dir,
    "kernel_settings": probe_kernel_settings,
    "host_files": probe_host_files,
    "other_control_dir": probe_other_control_dir,
    "capabilities": probe_capabilities,
    "prepare_setuid": prepare_setuid,
    "setuid": probe_setuid,
    "namespaces": probe_namespaces,
    "raw_sockets": probe_raw_sockets,
    "ownership": probe_ownership,
    "clock": probe_clock,
}
EXHAUSTION = {"fork_bomb": fork_bomb, "memory_hog": memory_hog, "disk_fill": disk_fill}


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1])
    if cfg.get("exhaust"):
        print(json.dumps(EXHAUSTION[cfg["exhaust"]](cfg)), flush=True)
        return 0
    results: dict[str, Any] = {}
    for name in cfg["probes"]:
        try:
            results[name] = PROBES[name](cfg)
        except Exception as exc:  # one probe's crash is its result, not the suite's end
            results[name] = [attempt(name, f"probe crashed: {_err(exc)}", True)]
    print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
