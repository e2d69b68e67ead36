"""sclate capture addon: records every model call made inside a sandbox.

Runs inside the sandbox under mitmdump, in reverse-proxy mode with one
listener per role::

    mitmdump -q -s /opt/sclate/capture.py \\
      --mode reverse:http://127.0.0.1:18080@127.0.0.1:4001 \\
      --mode reverse:http://127.0.0.1:18080@127.0.0.1:4002 \\
      --set sclate_roles=4001=agent,4002=memory

Environment (each has an option of the same meaning that wins when set):
``SCLATE_RUN_SECRET`` (``sclate_run_secret``), ``SCLATE_UPSTREAM_API_KEY``
(``sclate_upstream_key``), ``SCLATE_CONTROL_SOCKET`` (``sclate_control_socket``),
``SCLATE_SPOOL`` (``sclate_spool``), ``SCLATE_ROLES`` (``sclate_roles``).

This file is loaded by path as a mitmproxy script, so it imports only the
standard library and mitmproxy: nothing from ``sclated``.

With ``sclate_request_tokens`` on (the default) OpenAI-style chat and
completion requests that do not set them get ``"return_token_ids": true`` and
``logprobs`` added. The response then carries extra fields
(``prompt_token_ids``, ``token_ids``, ``logprobs``) which OpenAI clients
ignore; the response itself is never modified by this addon.
"""

# No `from __future__ import annotations`: mitmproxy loads scripts without
# registering them in sys.modules, and dataclasses then cannot resolve string
# annotations.
import asyncio
import codecs
import contextlib
import dataclasses
import hashlib
import hmac
import itertools
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

from mitmproxy import ctx, http

log = logging.getLogger("sclate.capture")

SCHEMA_VERSION = 1
KEY_PREFIX = "sk-sclate-"
DEFAULT_SOCKET = "/run/sclate/sclate.sock"
DEFAULT_SPOOL = "/var/spool/sclate"
UNKNOWN_ROLE = "unknown"

API_KINDS = (
    "openai_chat",
    "openai_completions",
    "openai_responses",
    "anthropic_messages",
    "other",
)

SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "stop",
    "stop_sequences",
    "seed",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "reasoning_effort",
    "reasoning",
    "thinking",
    "tool_choice",
    "response_format",
)

JSON = Any


# --------------------------------------------------------------------------
# Pure helpers (no I/O): parsing keys, classifying calls, reassembling streams
# --------------------------------------------------------------------------


def parse_roles(spec: str) -> dict[int, str]:
    """``"4001=agent,4002=memory"`` -> ``{4001: "agent", 4002: "memory"}``."""
    roles: dict[int, str] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        port_s, sep, role = part.partition("=")
        if not sep or not role.strip() or not port_s.strip().isdigit():
            raise ValueError(f"sclate_roles: bad entry {part!r} (want PORT=ROLE)")
        roles[int(port_s)] = role.strip()
    return roles


def run_from_key(key: str, secret: str) -> str | None:
    """The run named by ``sk-sclate-<run>-<secret>``, or None if the key is not ours.

    The secret is compared in constant time; an empty expected secret matches
    nothing, so a misconfigured sandbox fails closed instead of forwarding.
    """
    if not secret or not key.startswith(KEY_PREFIX):
        return None
    body = key[len(KEY_PREFIX) :]
    suffix = "-" + secret
    if len(body) <= len(suffix):
        return None
    run, given = body[: -len(suffix)], body[-len(suffix) :]
    if not hmac.compare_digest(given.encode(), suffix.encode()) or not run:
        return None
    return run


def api_kind(method: str, path: str) -> str:
    p = path.split("?", 1)[0].rstrip("/")
    if method.upper() != "POST":
        return "other"
    if p.endswith("/chat/completions"):
        return "openai_chat"
    if p.endswith("/completions"):
        return "openai_completions"
    if p.endswith("/responses"):
        return "openai_responses"
    if p.endswith("/messages"):
        return "anthropic_messages"
    return "other"


def sampling_of(body: JSON) -> dict[str, JSON]:
    if not isinstance(body, dict):
        return {}
    return {k: body[k] for k in SAMPLING_KEYS if k in body}


def _hash(obj: JSON) -> str:
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()
    ).hexdigest()


def derive_thread(api: str, body: JSON) -> str:
    """A stable thread id from the opening of a conversation.

    Calls of one conversation share their first messages (system prompt and
    first user message) while later ones only grow, so hashing that opening
    groups them without any help from the harness.
    """
    key: JSON
    if not isinstance(body, dict):
        key = ["raw", api]
    elif api == "openai_chat":
        msgs = body.get("messages")
        head: list[JSON] = []
        if isinstance(msgs, list):
            for m in msgs:
                head.append(m)
                if isinstance(m, dict) and m.get("role") == "user":
                    break
        key = [api, head]
    elif api == "anthropic_messages":
        msgs = body.get("messages")
        key = [api, body.get("system"), msgs[:1] if isinstance(msgs, list) else None]
    elif api == "openai_responses":
        inp = body.get("input")
        key = [api, body.get("instructions"), inp[:1] if isinstance(inp, list) else inp]
    elif api == "openai_completions":
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            key = [api, prompt[:2000]]
        elif isinstance(prompt, list):
            key = [api, prompt[:256]]
        else:
            key = [api, None]
    else:
        key = [api, sorted(body.keys())]
    return "t-" + _hash(key)[:16]


def parse_sse(text: str) -> tuple[list[tuple[str | None, str]], bool]:
    """Split an SSE body into ``(event, data)`` pairs; the flag says the last
    event was terminated (a stream cut mid-event leaves it False)."""
    events: list[tuple[str | None, str]] = []
    norm = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = norm.split("\n\n")
    terminated = norm.endswith("\n\n") or norm == ""
    for block in blocks:
        if not block.strip():
            continue
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data or name:
            events.append((name, "\n".join(data)))
    return events, terminated


def _json_or_none(s: str) -> JSON:
    try:
        return json.loads(s)
    except ValueError:
        return None


def _merge_tool_calls(acc: list[dict[str, JSON]], deltas: JSON) -> None:
    if not isinstance(deltas, list):
        return
    for d in deltas:
        if not isinstance(d, dict):
            continue
        idx = d.get("index", len(acc))
        while len(acc) <= idx:
            acc.append({"function": {"name": "", "arguments": ""}})
        tc = acc[idx]
        for k in ("id", "type"):
            if d.get(k) is not None:
                tc[k] = d[k]
        fn = d.get("function")
        if isinstance(fn, dict):
            if fn.get("name"):
                tc["function"]["name"] += fn["name"]
            if fn.get("arguments"):
                tc["function"]["arguments"] += fn["arguments"]


def assemble_openai_stream(api: str, datas: list[JSON]) -> tuple[JSON, bool]:
    """Rebuild the non-streamed response shape from chat/completions chunks."""
    final: dict[str, JSON] = {}
    choices: dict[int, dict[str, JSON]] = {}
    finished = False
    for d in datas:
        if d == "[DONE]":
            finished = True
            continue
        if not isinstance(d, dict):
            continue
        for k in ("id", "created", "model", "system_fingerprint"):
            if k in d and k not in final:
                final[k] = d[k]
        if d.get("usage") is not None:
            final["usage"] = d["usage"]
        if d.get("prompt_token_ids") is not None and "prompt_token_ids" not in final:
            final["prompt_token_ids"] = d["prompt_token_ids"]
        for ch in d.get("choices") or []:
            if not isinstance(ch, dict):
                continue
            i = int(ch.get("index", 0))
            c = choices.setdefault(i, {"index": i, "finish_reason": None})
            if ch.get("prompt_token_ids") is not None and "prompt_token_ids" not in c:
                c["prompt_token_ids"] = ch["prompt_token_ids"]
            if isinstance(ch.get("token_ids"), list):
                c.setdefault("token_ids", []).extend(ch["token_ids"])
            lp = ch.get("logprobs")
            if isinstance(lp, dict):
                acc_lp = c.setdefault("logprobs", {})
                for key in ("content", "token_logprobs", "tokens", "top_logprobs", "text_offset"):
                    if isinstance(lp.get(key), list):
                        acc_lp.setdefault(key, []).extend(lp[key])
            if ch.get("finish_reason") is not None:
                c["finish_reason"] = ch["finish_reason"]
                finished = True
            if ch.get("stop_reason") is not None:
                c["stop_reason"] = ch["stop_reason"]
            if api == "openai_chat":
                msg = c.setdefault("message", {"role": "assistant", "content": ""})
                delta = ch.get("delta") or {}
                if isinstance(delta, dict):
                    if delta.get("role"):
                        msg["role"] = delta["role"]
                    if isinstance(delta.get("content"), str):
                        msg["content"] += delta["content"]
                    for rk in ("reasoning_content", "reasoning"):
                        if isinstance(delta.get(rk), str):
                            msg[rk] = msg.get(rk, "") + delta[rk]
                    if delta.get("tool_calls"):
                        _merge_tool_calls(msg.setdefault("tool_calls", []), delta["tool_calls"])
            else:
                if isinstance(ch.get("text"), str):
                    c["text"] = c.get("text", "") + ch["text"]
    final["object"] = "chat.completion" if api == "openai_chat" else "text_completion"
    final["choices"] = [choices[i] for i in sorted(choices)]
    return final, finished


def assemble_anthropic_stream(events: list[tuple[str | None, JSON]]) -> tuple[JSON, bool]:
    msg: dict[str, JSON] = {}
    blocks: dict[int, dict[str, JSON]] = {}
    partial_json: dict[int, str] = {}
    finished = False
    for _name, d in events:
        if not isinstance(d, dict):
            continue
        t = d.get("type")
        if t == "message_start" and isinstance(d.get("message"), dict):
            msg = dict(d["message"])
        elif t == "content_block_start" and isinstance(d.get("content_block"), dict):
            blocks[int(d.get("index", len(blocks)))] = dict(d["content_block"])
        elif t == "content_block_delta" and isinstance(d.get("delta"), dict):
            i = int(d.get("index", 0))
            b = blocks.setdefault(i, {"type": "text", "text": ""})
            delta = d["delta"]
            dt = delta.get("type")
            if dt == "text_delta":
                b["text"] = b.get("text", "") + delta.get("text", "")
            elif dt == "input_json_delta":
                partial_json[i] = partial_json.get(i, "") + delta.get("partial_json", "")
            elif dt == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + delta.get("thinking", "")
            elif dt == "signature_delta":
                b["signature"] = b.get("signature", "") + delta.get("signature", "")
        elif t == "message_delta":
            delta = d.get("delta") or {}
            if isinstance(delta, dict):
                msg.update({k: v for k, v in delta.items()})
            if isinstance(d.get("usage"), dict):
                usage = dict(msg.get("usage") or {})
                usage.update(d["usage"])
                msg["usage"] = usage
        elif t == "message_stop":
            finished = True
    for i, s in partial_json.items():
        parsed = _json_or_none(s) if s else {}
        blocks[i]["input"] = parsed if parsed is not None else s
    msg["content"] = [blocks[i] for i in sorted(blocks)]
    return msg, finished


def assemble_stream(api: str, text: str) -> tuple[JSON, bool]:
    """The final response a non-streamed call would have returned, and whether
    the stream ended properly (a cut stream is a failed call)."""
    events, terminated = parse_sse(text)
    if api in ("openai_chat", "openai_completions"):
        datas = [e[1].strip() if e[1].strip() == "[DONE]" else _json_or_none(e[1]) for e in events]
        final, finished = assemble_openai_stream(api, datas)
        return final, finished and terminated
    if api == "anthropic_messages":
        final, finished = assemble_anthropic_stream([(n, _json_or_none(d)) for n, d in events])
        return final, finished and terminated
    if api == "openai_responses":
        last: JSON = None
        finished = False
        for _name, d in events:
            obj = _json_or_none(d)
            if isinstance(obj, dict) and isinstance(obj.get("response"), dict):
                last = obj["response"]
                if obj.get("type") == "response.completed":
                    finished = True
        return last, finished and terminated
    return None, terminated


@dataclasses.dataclass
class Tokens:
    prompt_token_ids: list[int] | None
    completions: list[dict[str, JSON]]
    usage: JSON
    finish_reason: str | None
    warnings: list[str]


def _int_list(v: JSON) -> list[int] | None:
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return list(v)
    return None


def extract_tokens(api: str, resp: JSON) -> Tokens:
    """Token ids and log probabilities exactly as the server returned them.

    Nothing is re-tokenized here: a response without ids yields None.
    """
    out = Tokens(None, [], None, None, [])
    if not isinstance(resp, dict):
        return out
    out.usage = resp.get("usage")
    out.prompt_token_ids = _int_list(resp.get("prompt_token_ids"))
    if api == "anthropic_messages":
        out.finish_reason = resp.get("stop_reason")
        return out
    if api == "openai_responses":
        out.finish_reason = resp.get("status")
        return out
    for ch in resp.get("choices") or []:
        if not isinstance(ch, dict):
            continue
        idx = int(ch.get("index", len(out.completions)))
        if out.prompt_token_ids is None:
            out.prompt_token_ids = _int_list(ch.get("prompt_token_ids"))
        token_ids = _int_list(ch.get("token_ids"))
        logprobs: list[float] | None = None
        lp = ch.get("logprobs")
        if isinstance(lp, dict):
            if isinstance(lp.get("content"), list):
                logprobs = [
                    float(e["logprob"])
                    for e in lp["content"]
                    if isinstance(e, dict) and isinstance(e.get("logprob"), int | float)
                ]
                if len(logprobs) != len(lp["content"]):
                    logprobs = None
            elif isinstance(lp.get("token_logprobs"), list):
                vals = lp["token_logprobs"]
                if all(isinstance(v, int | float) for v in vals):
                    logprobs = [float(v) for v in vals]
        if token_ids is not None and logprobs is not None and len(token_ids) != len(logprobs):
            out.warnings.append(
                f"choice {idx}: {len(token_ids)} token ids but {len(logprobs)} logprobs; "
                "logprobs dropped"
            )
            logprobs = None
        out.completions.append(
            {
                "index": idx,
                "token_ids": token_ids,
                "logprobs": logprobs,
                "finish_reason": ch.get("finish_reason"),
            }
        )
    out.completions.sort(key=lambda c: c["index"])
    if out.completions:
        out.finish_reason = out.completions[0]["finish_reason"]
    return out


def inject_token_flags(api: str, body: JSON) -> list[str]:
    """Ask the server for token ids and logprobs; returns the keys added."""
    if not isinstance(body, dict) or api not in ("openai_chat", "openai_completions"):
        return []
    added: list[str] = []
    if "return_token_ids" not in body:
        body["return_token_ids"] = True
        added.append("return_token_ids")
    if "logprobs" not in body:
        # Completions take an int (extra top alternatives); 0 still returns
        # the sampled token's own logprob. Chat takes a bool.
        body["logprobs"] = True if api == "openai_chat" else 0
        added.append("logprobs")
    return added


def add_fields(raw: bytes, fields: dict[str, JSON]) -> bytes | None:
    """``raw``, a JSON object, with ``fields`` (absent from it) put first, the
    rest left as it was: re-serialising a long conversation costs milliseconds.
    None if ``raw`` does not start like an object."""
    text = raw.lstrip()
    if not text.startswith(b"{"):
        return None
    rest = text[1:]
    added = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in fields.items()).encode()
    return b"{" + added + (b"" if rest.lstrip().startswith(b"}") else b", ") + rest


# --------------------------------------------------------------------------
# Control socket client and spool
# --------------------------------------------------------------------------


class ControlError(Exception):
    def __init__(self, error: str, reason: str):
        super().__init__(f"{reason}: {error}")
        self.error = error
        self.reason = reason


class ControlClient:
    """One persistent connection to the daemon's control socket.

    Requests are multiplexed by id; a reader task resolves replies. Any
    connection failure fails the pending requests and the next request
    reconnects, so a daemon restart costs one failed send, not a dead addon.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, JSON]]] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    async def _ensure(self) -> asyncio.StreamWriter:
        async with self._lock:
            if self._writer is None or self._writer.is_closing():
                reader, writer = await asyncio.open_unix_connection(self.path, limit=2**26)
                self._reader, self._writer = reader, writer
                self._reader_task = asyncio.create_task(self._read_loop(reader))
            return self._writer

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                msg = _json_or_none(line.decode("utf-8", "replace"))
                if not isinstance(msg, dict):
                    continue
                fut = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            self._drop(ConnectionError("control socket closed"))

    def _drop(self, exc: Exception) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    async def request(
        self, type_: str, payload: dict[str, JSON], wait_s: float, *, raw: str = ""
    ) -> dict[str, JSON]:
        """Send one request and wait for its reply; raises ControlError on
        ``ok: false`` and OSError/ConnectionError/TimeoutError when the daemon
        is away. ``raw``: members already serialised (``"record": {...}``),
        appended as they are."""
        async with asyncio.timeout(wait_s):
            writer = await self._ensure()
            rid = next(self._ids)
            fut: asyncio.Future[dict[str, JSON]] = asyncio.get_running_loop().create_future()
            self._pending[rid] = fut
            try:
                line = json.dumps({"id": rid, "type": type_, **payload})
                if raw:
                    line = f"{line[:-1]}, {raw}}}"
                writer.write((line + "\n").encode())
                await writer.drain()
                reply = await fut
            finally:
                self._pending.pop(rid, None)
        if not reply.get("ok"):
            raise ControlError(str(reply.get("error", "")), str(reply.get("reason", "UNKNOWN")))
        return reply

    async def close(self) -> None:
        self._drop(ConnectionError("control client closed"))
        task, self._reader_task = self._reader_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class Spool:
    """Finished records on disk until the daemon acknowledges them.

    Writes are temp + fsync + rename, so a crash leaves either the whole
    record or nothing; records the daemon rejects as invalid move to
    ``rejected/`` instead of being retried forever.
    """

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def path(self, call_id: str) -> Path:
        return self.root / f"{call_id}.json"

    def write(self, call_id: str, text: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.path(call_id)
        tmp = self.root / f".{call_id}.json.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)

    def remove(self, call_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(call_id).unlink()

    def reject(self, call_id: str) -> None:
        target = self.root / "rejected"
        target.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path(call_id), target / f"{call_id}.json")

    def pending(self) -> list[tuple[str, str]]:
        if not self.root.is_dir():
            return []
        out: list[tuple[str, str]] = []
        for p in sorted(self.root.glob("*.json"), key=lambda q: q.stat().st_mtime_ns):
            with contextlib.suppress(FileNotFoundError):
                out.append((p.stem, p.read_text(encoding="utf-8")))
        return out


# --------------------------------------------------------------------------
# The addon
# --------------------------------------------------------------------------


@dataclasses.dataclass
class _Call:
    call_id: str
    run: str
    role: str
    api: str
    method: str
    path: str
    start_ns: int
    thread: str = ""
    thread_source: str = "derived"
    turn: int | None = None
    parent_thread: str | None = None
    branch_hint: str | None = None
    request_body: JSON = None
    injected: list[str] = dataclasses.field(default_factory=list)
    body_hash: str = ""
    retry_of: str | None = None
    unleased: bool = False
    lease: asyncio.Task[None] | None = None
    first_byte_ns: int | None = None
    streamed: bool = False
    chunks: list[dict[str, JSON]] = dataclasses.field(default_factory=list)
    text_parts: list[str] = dataclasses.field(default_factory=list)
    decoder: codecs.IncrementalDecoder | None = None


class SclateCapture:
    """Hooks mitmproxy calls; see the module docstring for how it is run."""

    def __init__(self) -> None:
        self.roles: dict[int, str] = {}
        self.secret = ""
        self.upstream_key = ""
        self.socket_path = DEFAULT_SOCKET
        self.spool = Spool(DEFAULT_SPOOL)
        self.request_tokens = True
        self.lease_timeout_s = 0.5
        self.send_timeout_s = 5.0
        self.retry_interval_s = 2.0
        self.client = ControlClient(self.socket_path)
        self._calls: dict[str, _Call] = {}
        # (thread, body hash) -> id of the last call with that body that failed.
        self._failed: dict[tuple[str, str], str] = {}
        self._inflight: set[str] = set()
        # mitmproxy's own pattern: hold task references so they are not
        # garbage-collected mid-flight, drop them when done.
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()

    # -- options -----------------------------------------------------------

    def load(self, loader: Any) -> None:
        loader.add_option("sclate_roles", str, "", "Listener port to role: 4001=agent,4002=memory")
        loader.add_option("sclate_run_secret", str, "", "Per-run secret expected in the API key")
        loader.add_option("sclate_upstream_key", str, "", "Real upstream API key")
        loader.add_option("sclate_control_socket", str, "", "Daemon control socket path")
        loader.add_option("sclate_spool", str, "", "Spool directory for undelivered records")
        loader.add_option(
            "sclate_request_tokens",
            bool,
            True,
            "Ask OpenAI-style servers for token ids and logprobs",
        )
        loader.add_option(
            "sclate_retry_interval", float, 2.0, "Seconds between spool redelivery passes"
        )

    def configure(self, updated: set[str]) -> None:
        o = ctx.options
        env = os.environ
        self.roles = parse_roles(o.sclate_roles or env.get("SCLATE_ROLES", ""))
        self.secret = o.sclate_run_secret or env.get("SCLATE_RUN_SECRET", "")
        self.upstream_key = o.sclate_upstream_key or env.get("SCLATE_UPSTREAM_API_KEY", "")
        path = o.sclate_control_socket or env.get("SCLATE_CONTROL_SOCKET", "") or DEFAULT_SOCKET
        if path != self.client.path:
            old = self.client
            self.client = ControlClient(path)
            self._spawn(old.close(), "sclate-close-control")
        self.socket_path = path
        self.spool = Spool(o.sclate_spool or env.get("SCLATE_SPOOL", "") or DEFAULT_SPOOL)
        self.request_tokens = bool(o.sclate_request_tokens)
        self.retry_interval_s = float(o.sclate_retry_interval)

    # -- lifecycle ---------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any] | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            return None
        task = loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def running(self) -> None:
        self._spawn(self._redeliver_loop(), "sclate-redeliver")

    async def done(self) -> None:
        # Last chance to hand spooled records over; whatever fails stays on
        # disk for the next start.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await self.flush()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.client.close()

    async def flush(self) -> None:
        """Wait for in-flight deliveries, then try every spooled record once."""
        pending = [t for t in self._tasks if t.get_name().startswith("sclate-deliver-")]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.redeliver()

    async def redeliver(self) -> int:
        """Send every spooled record not already in flight; returns how many
        were acknowledged."""
        acked = 0
        for call_id, text in self.spool.pending():
            if await self._send(call_id, text):
                acked += 1
        return acked

    async def _redeliver_loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.redeliver()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.retry_interval_s):
                    await self._wake.wait()
            self._wake.clear()

    # -- flow hooks --------------------------------------------------------

    def _role(self, flow: http.HTTPFlow) -> str:
        sock = flow.client_conn.sockname
        port = sock[1] if sock else None
        if port is None:
            return UNKNOWN_ROLE
        return self.roles.get(int(port), UNKNOWN_ROLE)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        headers = flow.request.headers
        # Every lookup on mitmproxy's Headers scans them all (~3-5 us each):
        # look up only the headers that are there.
        present = {name.lower() for name, _ in headers.fields}

        def header(name: str) -> str | None:
            return headers.get(name) if name.encode() in present else None

        key_header = None
        key = ""
        auth = header("authorization") or ""
        if auth.lower().startswith("bearer "):
            key_header, key = "authorization", auth[7:].strip()
        elif header("x-api-key"):
            key_header, key = "x-api-key", headers["x-api-key"].strip()
        run = run_from_key(key, self.secret) if key_header else None
        if run is None:
            flow.response = http.Response.make(
                401,
                json.dumps(
                    {"error": {"message": "sclate: unknown API key", "type": "unauthenticated"}}
                ),
                {"content-type": "application/json"},
            )
            return
        # The agent only ever holds the per-run key; the real one is put on
        # here, on the way out.
        assert key_header is not None
        if self.upstream_key:
            real = self.upstream_key
            headers[key_header] = f"Bearer {real}" if key_header == "authorization" else real
        else:
            del headers[key_header]
        turn_s = header("x-sclate-turn")
        call = _Call(
            call_id=str(uuid.uuid4()),
            run=run,
            role=self._role(flow),
            api=api_kind(flow.request.method, flow.request.path),
            method=flow.request.method,
            path=flow.request.path,
            start_ns=time.time_ns(),
            turn=int(turn_s) if turn_s and turn_s.strip().lstrip("-").isdigit() else None,
            parent_thread=header("x-sclate-parent-thread") or None,
            branch_hint=header("x-sclate-branch") or None,
        )
        thread = header("x-sclate-thread")
        if thread:
            call.thread, call.thread_source = thread, "header"
        for h in ("x-sclate-thread", "x-sclate-turn", "x-sclate-parent-thread", "x-sclate-branch"):
            if h.encode() in present:
                del headers[h]
        self._calls[flow.id] = call
        # The lease is asked for now and awaited in `request`, before the call is
        # forwarded: the round trip overlaps mitmproxy reading the body and our
        # parsing it instead of following them.
        call.lease = self._spawn(self._call_start(call), f"sclate-start-{call.call_id}")

    async def request(self, flow: http.HTTPFlow) -> None:
        call = self._calls.get(flow.id)
        if call is None:
            return
        raw = flow.request.content or b""
        call.body_hash = hashlib.sha256(raw).hexdigest()
        body = _json_or_none(raw.decode("utf-8", "replace")) if raw else None
        if not call.thread:
            call.thread = derive_thread(call.api, body)
        if self.request_tokens:
            call.injected = inject_token_flags(call.api, body)
            if call.injected:
                assert isinstance(body, dict)
                spliced = add_fields(raw, {k: body[k] for k in call.injected})
                if spliced is None:
                    spliced = json.dumps(body, ensure_ascii=False).encode()
                flow.request.content = spliced
        call.request_body = body if body is not None or not raw else raw.decode("utf-8", "replace")
        call.retry_of = self._failed.get((call.thread, call.body_hash))
        await (call.lease if call.lease is not None else self._call_start(call))

    async def _call_start(self, call: _Call) -> None:
        try:
            await self.client.request(
                "call_start",
                {"call_id": call.call_id, "role": call.role},
                self.lease_timeout_s,
            )
        except (OSError, ConnectionError, TimeoutError, ControlError) as e:
            # The call goes ahead regardless: a missing lease costs simulated
            # time accuracy, refusing the call would break the agent. The
            # record says so, and the run counts it (calls_unleased).
            call.unleased = True
            log.warning("sclate: call_start for %s not acknowledged: %s", call.call_id, e)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        call = self._calls.get(flow.id)
        if call is None or flow.response is None:
            return
        call.first_byte_ns = time.time_ns()
        ctype = flow.response.headers.get("content-type", "")
        if ctype.split(";", 1)[0].strip().lower() == "text/event-stream":
            call.streamed = True
            call.decoder = codecs.getincrementaldecoder("utf-8")("replace")
            flow.response.stream = self._tee(call)

    def _tee(self, call: _Call) -> Callable[[bytes], Iterable[bytes] | bytes]:
        def tee(chunk: bytes) -> bytes:
            # Returned unchanged and at once: the agent sees the server's
            # chunks as they arrive; we only note time and text.
            if chunk:
                assert call.decoder is not None
                text = call.decoder.decode(chunk)
                call.chunks.append({"t_ns": time.time_ns(), "size": len(chunk), "text": text})
                call.text_parts.append(text)
            return chunk

        return tee

    def response(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, None)

    def error(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, flow.error.msg if flow.error else "unknown error")

    # -- finishing ---------------------------------------------------------

    def _finish(self, flow: http.HTTPFlow, error: str | None) -> None:
        call = self._calls.pop(flow.id, None)
        if call is None:
            return
        # The record is built and delivered in the background: doing either
        # here would hold back the end of the response the agent is waiting for.
        end_ns = time.time_ns()
        self._spawn(self._complete(call, flow, error, end_ns), f"sclate-deliver-{call.call_id}")

    def build_record(
        self, call: _Call, flow: http.HTTPFlow, error: str | None, end_ns: int | None = None
    ) -> dict[str, JSON]:
        end_ns = time.time_ns() if end_ns is None else end_ns
        resp = flow.response
        status = resp.status_code if resp is not None else None
        warnings: list[str] = []
        complete = error is None and status is not None and status < 400
        body: JSON = None
        if call.streamed:
            if call.decoder is not None:
                tail = call.decoder.decode(b"", final=True)
                if tail:
                    call.text_parts.append(tail)
            body, finished = assemble_stream(call.api, "".join(call.text_parts))
            if call.api != "other" and not finished:
                complete = False
                if error is None:
                    warnings.append("stream ended without a final event")
        elif resp is not None:
            raw = resp.get_content(strict=False) or b""
            text = raw.decode("utf-8", "replace")
            parsed = _json_or_none(text) if text else None
            body = parsed if parsed is not None else (text or None)
        tokens = extract_tokens(call.api, body)
        warnings.extend(tokens.warnings)
        model = call.request_body.get("model") if isinstance(call.request_body, dict) else None
        if model is None and isinstance(body, dict):
            model = body.get("model")
        return {
            "schema": SCHEMA_VERSION,
            "call_id": call.call_id,
            "run": call.run,
            "role": call.role,
            "api": call.api,
            "method": call.method,
            "path": call.path,
            "model": model if isinstance(model, str) else None,
            "stream": call.streamed,
            "sampling": sampling_of(call.request_body),
            "injected": call.injected,
            "request": call.request_body,
            "status": status,
            "response": body,
            "chunks": call.chunks,
            "prompt_token_ids": tokens.prompt_token_ids,
            "completions": tokens.completions,
            "usage": tokens.usage if isinstance(tokens.usage, dict) else None,
            "finish_reason": (
                tokens.finish_reason if isinstance(tokens.finish_reason, str) else None
            ),
            "timings": {
                "start_ns": call.start_ns,
                "first_byte_ns": call.first_byte_ns,
                "end_ns": end_ns,
            },
            "error": error,
            "complete": complete,
            "thread": call.thread,
            "thread_source": call.thread_source,
            "turn": call.turn,
            "parent_thread": call.parent_thread,
            "branch_hint": call.branch_hint,
            "retry_of": call.retry_of,
            "unleased": call.unleased,
            "warnings": warnings,
        }

    async def _complete(
        self, call: _Call, flow: http.HTTPFlow, error: str | None, end_ns: int
    ) -> None:
        # Before any await: a retry of this call cannot have arrived yet.
        record = self.build_record(call, flow, error, end_ns)
        failed = record["error"] is not None or not record["complete"]
        key = (call.thread, call.body_hash)
        if failed:
            self._failed[key] = call.call_id
        else:
            self._failed.pop(key, None)
        call_id = call.call_id
        if call.lease is not None and not call.lease.done():
            # A flow that failed before `request`: the release follows the ask.
            await asyncio.wait([call.lease])
        try:
            await self.client.request("call_end", {"call_id": call_id}, self.send_timeout_s)
        except (OSError, ConnectionError, TimeoutError, ControlError) as e:
            log.warning("sclate: call_end for %s not acknowledged: %s", call_id, e)
        text = json.dumps(record, ensure_ascii=False)
        # On disk before it is sent: if we die between the two, the record is
        # redelivered on the next start instead of lost.
        # On this thread, not asyncio.to_thread: under libfaketime (every sandbox)
        # a second Python thread makes the GIL hand-off spin (measured: +120 ms
        # of CPU and +87 ms per call back to back). The write (fsync included,
        # ~0.6 ms) happens after the response has gone.
        self.spool.write(call_id, text)
        if not await self._send(call_id, text, checked=True):
            self._wake.set()

    async def _send(self, call_id: str, text: str, *, checked: bool = False) -> bool:
        """Deliver one spooled record; the file goes only after the daemon's ok.
        ``checked``: ``text`` is known to be one line of JSON (we just wrote it),
        so it is sent as it is instead of parsed and serialised again."""
        if call_id in self._inflight:
            return False
        self._inflight.add(call_id)
        try:
            if not checked:
                text = json.dumps(json.loads(text), ensure_ascii=False)
            await self.client.request("record", {}, self.send_timeout_s, raw=f'"record": {text}')
            self.spool.remove(call_id)
            return True
        except ControlError as e:
            if e.reason.startswith("INVALID"):
                log.error("sclate: record %s rejected: %s", call_id, e)
                self.spool.reject(call_id)
            return False
        except (OSError, ConnectionError, TimeoutError, ValueError):
            return False
        finally:
            self._inflight.discard(call_id)


addons = [SclateCapture()]
