"""Call records shaped like the in-sandbox proxy's (``proxy_addons/capture.py``),
for seeding a run's calls in the store.

Every record goes through ``CallRecord.from_json`` before it is handed out, so
a record the capture schema would refuse never reaches a test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sclated.capture import CallRecord

BASE_NS = 1_700_000_000_000_000_000


def call(
    run: str,
    call_id: str,
    *,
    t: int,
    prompt: list[int],
    completion: list[int] | None,
    role: str = "agent",
    thread: str = "t-main",
    turn: int | None = None,
    logprobs: list[float] | bool | None = True,
    messages: list[dict[str, Any]] | None = None,
    reply: str = "ok",
    tool_calls: list[dict[str, Any]] | None = None,
    error: str | None = None,
    retry_of: str | None = None,
    parent_thread: str | None = None,
) -> dict[str, Any]:
    """One streamed OpenAI chat call as the proxy records it (JSON)."""
    start = BASE_NS + t * 1_000_000_000
    lps: list[float] | None
    if logprobs is True:
        lps = [-0.05 * (1 + i % 7) for i in range(len(completion or []))]
    elif logprobs is False:
        lps = None
    else:
        lps = logprobs
    message: dict[str, Any] = {"role": "assistant", "content": reply}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = "tool_calls" if tool_calls else "stop"
    sse = [
        "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": reply}}]}) + "\n\n",
        "data: [DONE]\n\n",
    ]
    record: dict[str, Any] = {
        "schema": 1,
        "call_id": call_id,
        "run": run,
        "role": role,
        "api": "openai_chat",
        "method": "POST",
        "path": "/v1/chat/completions",
        "model": "SmolLM2-135M-Instruct",
        "stream": True,
        "sampling": {"temperature": 0.7, "max_tokens": 256},
        "injected": ["logprobs", "return_token_ids"],
        "request": {
            "model": "SmolLM2-135M-Instruct",
            "stream": True,
            "messages": messages or [{"role": "user", "content": "hello"}],
            "logprobs": True,
        },
        "status": None if error else 200,
        "response": None
        if error
        else {
            "id": f"chatcmpl-{call_id}",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        },
        "chunks": [
            {"t_ns": start + 1_000_000 * (i + 1), "size": len(c.encode()), "text": c}
            for i, c in enumerate(sse if not error else sse[:1])
        ],
        "prompt_token_ids": prompt,
        "completions": []
        if completion is None
        else [
            {
                "index": 0,
                "token_ids": completion,
                "logprobs": lps,
                "finish_reason": None if error else finish,
            }
        ],
        "usage": None
        if error
        else {"prompt_tokens": len(prompt), "completion_tokens": len(completion or [])},
        "finish_reason": None if error else finish,
        "timings": {
            "start_ns": start,
            "first_byte_ns": start + 1_000_000,
            "end_ns": start + 5_000_000,
        },
        "error": error,
        "complete": error is None,
        "thread": thread,
        "thread_source": "header",
        "turn": turn,
        "parent_thread": parent_thread,
        "branch_hint": None,
        "retry_of": retry_of,
        "warnings": [],
    }
    CallRecord.from_json(record)
    return record


@dataclass
class Scenario:
    """The calls of one run and what their trajectories must look like."""

    records: list[dict[str, Any]] = field(default_factory=list)
    agent_prompt: list[int] = field(default_factory=list)
    agent_calls: tuple[str, ...] = ()
    failed: str = ""
    retry: str = ""
    memory_call: str = ""
    subagent_call: str = ""


def scenario(run: str) -> Scenario:
    """An agent thread with a tool call, a failed call and its retry, a memory
    call on its own thread, and a sub-agent whose server returned no logprobs."""
    system = {"role": "system", "content": "You are a careful assistant."}
    user1 = {"role": "user", "content": "List the files in /data."}
    p0 = [1, 2, 3, 4, 5, 6, 7, 8]
    s1 = [101, 102, 103, 104]
    a1 = call(
        run,
        "call-a1",
        t=1,
        turn=1,
        prompt=p0,
        completion=s1,
        messages=[system, user1],
        reply="",
        tool_calls=[
            {
                "id": "tc-1",
                "type": "function",
                "function": {"name": "ls", "arguments": '{"path": "/data"}'},
            }
        ],
    )
    p1 = p0 + s1 + [201, 202, 203]
    s2 = [105, 106]
    a2 = call(
        run,
        "call-a2",
        t=2,
        turn=1,
        prompt=p1,
        completion=s2,
        messages=[
            system,
            user1,
            {"role": "assistant", "content": ""},
            {"role": "tool", "tool_call_id": "tc-1", "content": "a.txt b.txt"},
        ],
        reply="There are two files.",
    )
    m1 = call(
        run,
        "call-m1",
        t=3,
        role="memory",
        thread="t-memory",
        prompt=[900, 901, 902, 903],
        completion=[950, 951, 952],
        messages=[{"role": "user", "content": "Summarise: two files in /data."}],
        reply="/data holds a.txt and b.txt",
    )
    p2 = p1 + s2 + [301, 302]
    user2 = {"role": "user", "content": "Which is bigger?"}
    history = [
        system,
        user1,
        {"role": "assistant", "content": ""},
        {"role": "tool", "tool_call_id": "tc-1", "content": "a.txt b.txt"},
        {"role": "assistant", "content": "There are two files."},
        user2,
    ]
    failed = call(
        run,
        "call-f1",
        t=4,
        turn=2,
        prompt=p2,
        completion=[107],
        messages=history,
        error="upstream connection reset mid-stream",
    )
    s3 = [107, 108, 109]
    retry = call(
        run,
        "call-r1",
        t=5,
        turn=2,
        prompt=p2,
        completion=s3,
        messages=history,
        retry_of="call-f1",
        reply="b.txt",
    )
    p3 = p2 + s3 + [401]
    s4 = [110]
    a3 = call(
        run,
        "call-a3",
        t=6,
        turn=3,
        prompt=p3,
        completion=s4,
        messages=[
            *history,
            {"role": "assistant", "content": "b.txt"},
            {"role": "user", "content": "thanks"},
        ],
        reply="You're welcome.",
    )
    sub = call(
        run,
        "call-s1",
        t=7,
        thread="t-sub",
        parent_thread="t-main",
        prompt=[500, 501, 502],
        completion=[550, 551],
        logprobs=False,
        messages=[{"role": "user", "content": "check sizes"}],
        reply="b.txt is bigger",
    )
    return Scenario(
        records=[a1, a2, m1, failed, retry, a3, sub],
        agent_prompt=p0,
        agent_calls=("call-a1", "call-a2", "call-a3"),
        failed="call-f1",
        retry="call-r1",
        memory_call="call-m1",
        subagent_call="call-s1",
    )


def sampled(records: list[dict[str, Any]], call_ids: tuple[str, ...] | list[str]) -> int:
    """How many tokens the model sampled in these calls (choice 0)."""
    by_id = {r["call_id"]: r for r in records}
    return sum(len(by_id[c]["completions"][0]["token_ids"]) for c in call_ids)
