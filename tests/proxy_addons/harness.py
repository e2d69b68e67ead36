"""The capture addon in memory, driven through mitmproxy's test helpers (as
mitmproxy's own addon tests do), with a real Unix-socket control server on the
other side: constants, flows, replies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mitmproxy import http
from mitmproxy.test import taddons, tflow

from proxy_addons.capture import SclateCapture

SECRET = "s3cr3t-xyz"
RUN = "run-42"
KEY = f"sk-sclate-{RUN}-{SECRET}"
REAL = "real-upstream-key"

CHAT_BODY: dict[str, Any] = {
    "model": "m1",
    "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "hi"},
    ],
    "temperature": 0.7,
    "max_tokens": 16,
    "seed": 3,
}

VLLM_CHAT_RESPONSE: dict[str, Any] = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m1",
    "prompt_token_ids": [1, 2, 3, 4],
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello"},
            "finish_reason": "stop",
            "token_ids": [10, 11],
            "logprobs": {
                "content": [
                    {"token": "hel", "logprob": -0.5, "top_logprobs": []},
                    {"token": "lo", "logprob": -0.25, "top_logprobs": []},
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
}


def sse(*events: Any) -> bytes:
    """``data:`` events (JSON, or a string such as ``[DONE]`` as it is)."""
    out = b""
    for e in events:
        data = e if isinstance(e, str) else json.dumps(e, ensure_ascii=False)
        out += f"data: {data}\n\n".encode()
    return out


class Harness:
    def __init__(self, addon: SclateCapture, tctx: taddons.context, spool: Path) -> None:
        self.addon = addon
        self.tctx = tctx
        self.spool = spool

    def flow(
        self,
        body: Any = None,
        *,
        port: int = 4001,
        path: str = "/v1/chat/completions",
        headers: dict[str, str] | None = None,
        key: str | None = KEY,
    ) -> http.HTTPFlow:
        f = tflow.tflow()
        f.client_conn.sockname = ("127.0.0.1", port)
        h: dict[str | bytes, str | bytes] = {"content-type": "application/json"}
        if key is not None:
            h["authorization"] = f"Bearer {key}"
        h.update(headers or {})
        f.request = http.Request.make(
            "POST",
            f"http://127.0.0.1:{port}{path}",
            json.dumps(CHAT_BODY if body is None else body),
            h,
        )
        f.response = None
        return f

    async def send(self, f: http.HTTPFlow) -> None:
        self.addon.requestheaders(f)
        if f.response is None:
            await self.addon.request(f)

    async def reply_json(self, f: http.HTTPFlow, body: Any, status: int = 200) -> None:
        f.response = http.Response.make(status, json.dumps(body), {"content-type": "application/json"})
        self.addon.responseheaders(f)
        self.addon.response(f)
        await self.addon.flush()

    def start_sse(self, f: http.HTTPFlow) -> Any:
        f.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
        self.addon.responseheaders(f)
        stream = f.response.stream
        assert callable(stream)
        return stream

    async def reply_sse(self, f: http.HTTPFlow, body: bytes) -> None:
        stream = self.start_sse(f)
        stream(body)
        self.addon.response(f)
        await self.addon.flush()
