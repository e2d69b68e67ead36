"""`sclated doctor`: is this host ready to run sandboxed agents?

Checks the container engine, the images, simulated time inside a sandbox (the
runtime's checks), then the model endpoint (a real chat call returning token
ids) and the capture proxy (mitmdump with the capture addon in front of that
endpoint, the record arriving on a control socket), and the data roots the
daemon's configuration gives (``--config``, or ``--state-dir`` and the roots'
flags): the host paths runs may name; and the sandbox escape checks (two
sandboxes set up as runs' are, one attacking: the Docker socket, the host's
services, the other sandbox, the outside, the host's files and kernel settings,
privileges, a fork bomb, a memory hog, a disk fill; ``--skip-isolation`` leaves
them out). Prints a table, or JSON with ``--json`` (``data_roots`` there lists
the roots, ``isolation`` the escape checks); exits non-zero on any failure,
each saying what to do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from sclated.model import EmbeddedModel
from sclated.runtime import Check, run_doctor
from sclated.sandbox import ControlServer, IsolationResult, run_isolation_checks

__all__ = [
    "EMBEDDED_FIX",
    "SYSTEM_CONFIG",
    "check_data_roots_in_effect",
    "check_embedded_model",
    "check_model",
    "check_proxy",
    "run_doctor_cli",
]

SYSTEM_CONFIG = Path("/etc/sclated/sclated.toml")
"""The packaged daemon's configuration (systemd/sclated.service), read when no other is given."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _chat(url: str, *, api_key: str = "") -> dict[str, Any]:
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 4,
        "temperature": 0,
        "return_token_ids": True,
        "logprobs": True,
    }
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{url}/v1/chat/completions", json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=120)
        ) as r,
    ):
        data: dict[str, Any] = await r.json(content_type=None)
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {str(data)[:200]}")
        return data


async def check_model(url: str, *, require_token_ids: bool = True, fix: str = "") -> Check:
    """A real completion from ``url``: at least one sampled token, with token ids when required.

    The embedded model must return token ids (trajectories are built from
    them); an external endpoint without them still serves runs, but its
    trajectories cannot be exported, which the check says.
    """
    fix = fix or "start it: `sclated model serve --port 8000`, or fix --model-url"
    try:
        data = await _chat(url)
        choice = data["choices"][0]
        ids = choice.get("token_ids") or []
        prompt_ids = data.get("prompt_token_ids") or []
        text = str((choice.get("message") or {}).get("content") or "")
        completion_tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)
    except Exception as exc:
        return Check("model endpoint", False, f"{url}: no completion: {type(exc).__name__}: {exc}", fix)
    if not ids and not completion_tokens and not text:
        return Check("model endpoint", False, f"{url} answered, but produced no token", fix)
    if not ids or not prompt_ids:
        if require_token_ids:
            return Check("model endpoint", False, f"{url} produced text but no token ids", fix)
        return Check(
            "model endpoint",
            True,
            f"{url} answered, but without token ids (trajectories need a vLLM/SGLang-style server)",
        )
    return Check("model endpoint", True, f"{url}: {len(prompt_ids)} prompt + {len(ids)} completion token ids")


EMBEDDED_FIX = (
    "the embedded llama.cpp model does not work on this machine: run `sclated doctor`; if it crashes "
    "(SIGSEGV/SIGILL), rebuild it for this CPU: `.venv/bin/pip uninstall -y llama-cpp-python; "
    "rm -rf ~/.cache/sclate/wheels/llama-*; make venv`"
)


async def check_embedded_model(log_dir: Path) -> Check:
    """Start the embedded model, ask it for a real completion with token ids, stop it."""
    embedded = EmbeddedModel(log_path=log_dir / "model.log", max_restarts=1)
    try:
        try:
            url = await embedded.url()
        except Exception as exc:
            return Check("model endpoint", False, f"the embedded model did not start: {exc}", EMBEDDED_FIX)
        check = await check_model(url, fix=EMBEDDED_FIX)
        status = embedded.status
        if not check.ok and status.last_exit:
            detail = f"{check.detail}; the model process died: {status.last_exit} (log {status.log_path})"
            return Check(check.name, False, detail, EMBEDDED_FIX)
        return check
    finally:
        await embedded.close()


async def check_proxy(url: str) -> Check:
    mitmdump = shutil.which(
        "mitmdump", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    )
    if mitmdump is None:
        return Check("capture proxy", False, "mitmdump is not installed", "reinstall: `make venv`")
    import proxy_addons

    addon = Path(proxy_addons.__file__).parent / "capture.py"
    secret = secrets.token_hex(8)
    records: list[Mapping[str, Any]] = []

    async def ok(msg: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    async def record(msg: Mapping[str, Any]) -> dict[str, Any]:
        records.append(msg["record"])
        return {"stored": True}

    with tempfile.TemporaryDirectory(prefix="sclate-doctor-") as tmp:
        sock = Path(tmp) / "sclate.sock"
        control = ControlServer(sock, {"call_start": ok, "call_end": ok, "record": record, "hello": ok})
        await control.start()
        port = _free_port()
        env = {
            **os.environ,
            "SCLATE_RUN_SECRET": secret,
            "SCLATE_CONTROL_SOCKET": str(sock),
            "SCLATE_SPOOL": f"{tmp}/spool",
        }
        proc = await asyncio.create_subprocess_exec(
            mitmdump,
            "-q",
            "-s",
            str(addon),
            "--mode",
            f"reverse:{url}@127.0.0.1:{port}",
            "--set",
            f"sclate_roles={port}=agent",
            "--set",
            f"confdir={tmp}/mitm",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", port)
                    w.close()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.returncode is not None:
                        return Check(
                            "capture proxy", False, "mitmdump did not start listening", "see `mitmdump --version`"
                        )
                    await asyncio.sleep(0.1)
            try:
                await _chat(f"http://127.0.0.1:{port}", api_key=f"sk-sclate-doctor-{secret}")
            except Exception as exc:
                return Check(
                    "capture proxy", False, f"a call through the proxy failed: {exc}", "check the model endpoint"
                )
            for _ in range(100):
                if records:
                    break
                await asyncio.sleep(0.05)
        finally:
            proc.terminate()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 10)
            await control.close()
    if not records:
        return Check("capture proxy", False, "the call went through but no record reached the control socket", "")
    rec = records[0]
    n = len((rec.get("completions") or [{}])[0].get("token_ids") or [])
    return Check("capture proxy", True, f"mitmdump + capture addon recorded the call ({n} completion token ids)")


async def _all(model_url: str | None, skip_runtime: bool) -> list[Check]:
    checks: list[Check] = [] if skip_runtime else await run_doctor()
    embedded: EmbeddedModel | None = None
    with tempfile.TemporaryDirectory(prefix="sclate-doctor-model-") as tmp:
        try:
            if not model_url:
                embedded = EmbeddedModel(log_path=Path(tmp) / "model.log", max_restarts=1)
                try:
                    model_url = await embedded.url()
                except Exception as exc:
                    checks.append(
                        Check("model endpoint", False, f"the embedded model did not start: {exc}", EMBEDDED_FIX)
                    )
                    return checks
                check = await check_model(model_url, fix=EMBEDDED_FIX)
                if not check.ok and embedded.status.last_exit:
                    check = Check(
                        check.name,
                        False,
                        f"{check.detail}; the model process died: {embedded.status.last_exit}",
                        EMBEDDED_FIX,
                    )
            else:
                check = await check_model(model_url, require_token_ids=False)
            checks.append(check)
            if check.ok:
                checks.append(await check_proxy(model_url))
        finally:
            if embedded is not None:
                await embedded.close()
    return checks


def check_data_roots_in_effect(
    config: Path | None = None,
    state_dir: Path | None = None,
    data_roots: list[Path] | None = None,
    tenant_data_roots: list[str] | None = None,
) -> tuple[Check, dict[str, Any] | None]:
    """The data roots a daemon with this configuration confines runs to (None: no configuration
    given, and none at :data:`SYSTEM_CONFIG`); the check fails if the daemon would refuse them."""
    from sclated.daemon import build_parser, check_data_roots, data_roots_for, load_config
    from sclated.errors import ConfigError
    from sclated.runs import default_registry

    name = "data roots"
    if config is None and state_dir is None and not data_roots and not tenant_data_roots:
        if not SYSTEM_CONFIG.is_file():
            return Check(name, True, "no daemon configuration given (--config, or --state-dir): not checked"), None
        config = SYSTEM_CONFIG
    args = build_parser().parse_args([])
    args.config, args.state_dir = config, state_dir
    args.data_roots, args.tenant_data_roots = data_roots, tenant_data_roots
    fix = "fix data_roots / tenant_data_roots in the daemon's configuration (each an existing directory)"
    try:
        cfg = load_config(args)
        check_data_roots(cfg)
    except ConfigError as exc:
        return Check(name, False, exc.message, fix), None
    roots = data_roots_for(cfg, default_registry().builtin_data())
    described = roots.describe()
    detail = ", ".join(described["default"])
    if described["tenants"]:
        detail += f"; own roots for {', '.join(described['tenants'])}"
    return Check(name, True, f"runs may name paths in {detail} (and the benchmarks' built-in data)"), described


async def _isolation(skip: bool) -> list[IsolationResult] | None:
    return None if skip else await run_isolation_checks()


def run_doctor_cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="sclated doctor", description=__doc__)
    p.add_argument("--json", action="store_true")
    p.add_argument("--model-url", help="check this endpoint instead of starting the embedded model")
    p.add_argument("--skip-runtime", action="store_true", help="only the model and proxy checks")
    p.add_argument("--skip-isolation", action="store_true", help="leave out the sandbox escape checks (about 10-20 s)")
    p.add_argument(
        "--config", type=Path, help=f"the daemon's configuration, for its data roots (default {SYSTEM_CONFIG} if any)"
    )
    p.add_argument("--state-dir", type=Path, help="the daemon's state directory (its default data root is data/ in it)")
    p.add_argument("--data-root", dest="data_roots", action="append", type=Path, metavar="DIR")
    p.add_argument("--tenant-data-root", dest="tenant_data_roots", action="append", metavar="TENANT=DIR")
    args = p.parse_args(argv)
    from adapters.harnesses import register_harness_images

    register_harness_images()
    roots_check, roots = check_data_roots_in_effect(
        args.config, args.state_dir, args.data_roots, args.tenant_data_roots
    )
    checks = [*asyncio.run(_all(args.model_url, args.skip_runtime)), roots_check]
    # The escape checks need the engine: --skip-runtime leaves them out too.
    isolation = asyncio.run(_isolation(args.skip_isolation or args.skip_runtime))
    failed = [c for c in checks if not c.ok] + [r for r in isolation or [] if not r.passed]
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not failed,
                    "checks": [c.__dict__ for c in checks],
                    "data_roots": roots,
                    "isolation": None if isolation is None else [r.as_dict() for r in isolation],
                }
            )
        )
    else:
        from rich.console import Console
        from rich.table import Table

        console = Console()
        t = Table("check", "", "detail", "what to do")
        for c in checks:
            t.add_row(c.name, "[green]ok[/]" if c.ok else "[red]FAIL[/]", c.detail, c.fix if not c.ok else "")
        console.print(t)
        if isolation is not None:
            t = Table("sandbox escape check", "", "expected", "observed", "what to do", title="isolation")
            for r in isolation:
                ok = "[green]ok[/]" if r.passed else "[red]FAIL[/]"
                t.add_row(r.name, ok, r.expected, r.detail if r.passed else f"{r.detail} ({r.observed})", r.fix)
            console.print(t)
    return 1 if failed else 0
