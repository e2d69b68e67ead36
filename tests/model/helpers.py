"""SSE reading with arrival times, shared by the model server tests."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass
class Event:
    event: str | None
    data: Any  # parsed JSON, or the raw string for "[DONE]"
    at: float  # monotonic arrival time


async def read_sse(response: aiohttp.ClientResponse) -> list[Event]:
    """Parse an SSE body line by line as it arrives, stamping each event."""
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events: list[Event] = []
    name: str | None = None
    data: list[str] = []
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data.append(line[len("data: ") :])
        elif line == "" and data:
            body = "\n".join(data)
            parsed = body if body == "[DONE]" else json.loads(body)
            events.append(Event(name, parsed, time.monotonic()))
            name, data = None, []
    return events


async def post_sse(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[list[Event], float]:
    start = time.monotonic()
    async with session.post(url, json={**body, "stream": True}) as response:
        return await read_sse(response), start


async def post_json(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], status: int = 200
) -> dict[str, Any]:
    async with session.post(url, json=body) as response:
        payload: dict[str, Any] = await response.json()
        assert response.status == status, payload
        return payload
