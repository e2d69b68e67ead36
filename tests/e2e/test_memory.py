"""Memory systems behind real harnesses, for real: a daemon process, the pair's
sandbox image, the embedded model (chat and embeddings), capture, snapshots.

The mechanics are asserted, not the tiny model's quality: what a haystack
session stored is in the memory system's own store (read from a snapshot's
archive of the memory volume), the question's prompt carries what the system
recalled, every memory call is captured and attributed to its component, a
branch starts from exactly the store of its snapshot, and two runs at once never
see each other's memories.

Each memory system runs behind the reference harness and behind an unmodified
harness: Hindsight behind Hermes here, Mem0 behind Claude Code in
tests/e2e/test_memory_claude_code.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
import sqlite3
import tarfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process

from ._runs import final, stored_calls, turn_errors

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.model]

CAT = "lme_tiny_ssu_1"
"""Haystack: a garden session, the cat session (Biscuit), a recipe session; then the question."""
CITY = "lme_tiny_ku_2"
"""Haystack: moving to Lisbon, then to Porto; then the question."""
RECALL_HEADING = "What you remember about this"
N_CTX = ("--model-n-ctx", "16384")
"""Mem0's extraction prompt (its instructions, the existing memories, the exchange) is
several thousand tokens: more than the embedded model's default context."""


@dataclass
class MemoryRuns:
    runs: dict[str, pb.Run]
    calls: dict[str, list[dict[str, Any]]]
    errors: list[tuple[str, str, str]]
    turns: dict[str, list[pb.AgentTurnEvent]]
    """Each run's ended turns, in order (with what the memory system did in each)."""
    snapshots: dict[str, Path]
    """Snapshot id -> the archive of the memory volume it kept."""
    live: dict[str, list[str]]
    """Snapshot id -> what ``read_live`` read from the store right after it was taken."""


def _texts(value: Any) -> str:
    """Every string inside a JSON value, joined (a request's prompt, as text)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_texts(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_texts(v) for v in value)
    return ""


def _member(archive: Path, suffix: str, dest: Path) -> Path | None:
    """Extract the member of ``archive`` whose name ends with ``suffix`` (None: absent)."""
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            if m.name.endswith(suffix) and m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(io.BytesIO(f.read()).getvalue())
                return dest
    return None


def mem0_store(archive: Path, tmp: Path) -> dict[str, list[str]]:
    """Mem0's own SQLite store in a snapshot: memories it added, messages it saved."""
    db = _member(archive, "mem0/history.db", tmp / "history.db")
    if db is None:
        return {"memories": [], "messages": []}
    with sqlite3.connect(db) as conn:
        memories = [r[0] for r in conn.execute("SELECT new_memory FROM history WHERE event = 'ADD'") if r[0]]
        messages = [r[0] for r in conn.execute("SELECT content FROM messages") if r[0]]
    return {"memories": memories, "messages": messages}


async def ended_turns(stub: pb_grpc.SclateStub, name: str) -> list[pb.AgentTurnEvent]:
    return [
        ev.turn
        async for ev in stub.WatchRun(pb.WatchRunRequest(name=name))
        if ev.WhichOneof("kind") == "turn" and ev.turn.phase == "ended"
    ]


async def _ended_turns(stub: pb_grpc.SclateStub, name: str, count: int) -> None:
    seen = 0
    async for ev in stub.WatchRun(pb.WatchRunRequest(name=name)):
        if ev.WhichOneof("kind") == "turn" and ev.turn.phase == "ended":
            seen += 1
            if seen == count:
                return
        if ev.WhichOneof("kind") == "state":
            assert ev.state.state in (pb.PENDING, pb.RUNNING), ev.state.reason
    raise AssertionError(f"{name} ended before {count} turns did")


async def run_pair(
    tmp_path: Path,
    harness: str,
    memory: str,
    options: dict[str, Any],
    read_live: Callable[[str], Awaitable[list[str]]] | None = None,
    *,
    neighbour: bool = True,
    branch: bool = True,
) -> MemoryRuns:
    """Two runs at once (the cat and the city question), snapshots of the cat run before
    and after its cat session (after the recipe session that follows it), and a branch
    from the later one, all to the end.

    ``neighbour=False`` leaves out the city run: that two runs never share a store is
    the substrate's, shown by the reference harness's pairs; a harness's own pair
    spends its time on the harness. ``branch=False`` leaves out the branch (a fresh
    sandbox and the question again) for the same reason; both snapshots are still
    taken (they are how the store is read back)."""
    state = tmp_path / "state"
    proc, ready = await start_daemon_process(state, *N_CTX)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)

            async def create(question: str, run_id: str) -> pb.Run:
                run = pb.Run(
                    benchmark=pb.BenchmarkSpec(name="longmemeval", scenario="tiny", subset=[question]),
                    agent=pb.AgentSpec(harness=harness, memory=memory),
                )
                run.agent.options.update(options)
                created: pb.Run = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id=run_id))
                return created

            cat = await create(CAT, "cat")
            city = await create(CITY, "city") if neighbour else None
            # Turn 1 is the garden session; turns 2 and 3 the cat session.
            await _ended_turns(stub, cat.name, 1)
            live: dict[str, list[str]] = {}
            await stub.SaveSnapshot(pb.SaveSnapshotRequest(run=cat.name, snapshot_id="before-cat"))
            if read_live is not None:
                live["before-cat"] = await read_live("cat")
            # Turn 4 is the recipe session: the branch has only the question left to run.
            await _ended_turns(stub, cat.name, 4)
            after = await stub.SaveSnapshot(pb.SaveSnapshotRequest(run=cat.name, snapshot_id="after-cat"))
            if read_live is not None:
                live["after-cat"] = await read_live("cat")
            names = {"cat": cat.name}
            if branch:
                restored = await stub.RestoreSnapshot(
                    pb.RestoreSnapshotRequest(snapshot=after.name, new_run_id="cat-br")
                )
                names["cat-br"] = restored.name
            if city is not None:
                names["city"] = city.name
            runs = {key: await final(stub, name) for key, name in names.items()}
            errors = await turn_errors(stub, *names.values())
            turns = {key: await ended_turns(stub, name) for key, name in names.items()}
            calls = {key: await stored_calls(state, f"local/{key}") for key in names}
            # Copied out before the runs (and their snapshots) are deleted.
            snapshots = {}
            for sid in ("before-cat", "after-cat"):
                archive = next((state / "runs").glob(f"**/snapshots/{sid}/**/memory.tar"))
                snapshots[sid] = tmp_path / f"{sid}.tar"
                snapshots[sid].write_bytes(archive.read_bytes())
            for name in names.values():
                await stub.DeleteRun(pb.DeleteRunRequest(name=name))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    return MemoryRuns(runs, calls, errors, turns, snapshots, live)


def mem0_answers(calls: list[dict[str, Any]]) -> list[str]:
    """What Mem0's own model calls answered (its fact extraction, its update decisions):
    the first thing to read when Mem0 stored nothing (the embedded model may extract no fact)."""
    out = []
    for c in calls:
        if c.get("component") != "memory:mem0":
            continue
        try:
            out.append(str(c["response"]["choices"][0]["message"]["content"])[:400])
        except (KeyError, IndexError, TypeError):
            out.append(f"<no answer: {str(c.get('error') or c.get('status'))[:200]}>")
    return out


def check_accounting(run: pb.Run, calls: list[dict[str, Any]], system: str) -> None:
    """Every memory call captured and attributed: the system's own and its embeddings."""
    assert run.state == pb.SUCCEEDED, run.state_reason
    r = run.results
    assert r.capture.calls_lost == 0 and r.capture.drain == "ok", r.capture
    memory = [c for c in calls if c["role"] == "memory"]
    components = {c["component"] for c in memory}
    # The harness's own memory work (the reference harness's nightly MEMORY.md) is apart.
    assert (
        {f"memory:{system}", "memory:embeddings"}
        <= components
        <= {
            f"memory:{system}",
            "memory:embeddings",
            "memory:native",
        }
    ), components
    embeddings = [c for c in memory if c["component"] == "memory:embeddings"]
    assert all(c["api"] == "openai_embeddings" and (c["usage"] or {}).get("prompt_tokens") for c in embeddings)
    assert all(d.get("dimensions") == 384 for c in embeddings for d in c["response"]["data"])
    own = [c for c in memory if c["component"] == f"memory:{system}" and c["complete"]]
    assert r.capture.calls_failed == 0, r.capture.failed_by_cause
    assert own and all(c["prompt_token_ids"] and c["completions"][0]["token_ids"] for c in own)
    assert all(c["component"] == "agent" for c in calls if c["role"] == "agent")
    by_component = {row.role: row for row in r.components}
    assert by_component[f"memory:{system}"].calls == len({c["call_id"] for c in own if not c["retry_of"]})
    assert by_component["memory:embeddings"].calls == len(embeddings)
    assert 0 < r.memory_token_share < 1


def question_prompt(calls: list[dict[str, Any]]) -> str:
    """The question as the agent's first call in the question's turn (the last turn) asked
    it: its last user message (the reference harness recalls into the turn's message)."""
    agent = [c for c in calls if c["role"] == "agent"]
    last_turn = agent[-1]["turn"] if agent[-1]["turn"] is not None else None
    first = next(c for c in agent if c["turn"] == last_turn) if last_turn is not None else agent[-1]
    asked = [m for m in first["request"]["messages"] if m["role"] == "user"]
    return str(asked[-1]["content"])


async def test_reference_harness_with_mem0(tmp_path: Path) -> None:
    got = await run_pair(tmp_path, "reference", "mem0", {"max_steps": 1, "max_tokens": 64, "turn_timeout_s": 300})
    assert got.errors == [], got.errors
    for key in ("cat", "city", "cat-br"):
        check_accounting(got.runs[key], got.calls[key], "mem0")
    before = mem0_store(got.snapshots["before-cat"], tmp_path / "before")
    after = mem0_store(got.snapshots["after-cat"], tmp_path / "after")
    # The cat session was stored by Mem0 itself, and only after it happened.
    assert any("Biscuit" in m for m in after["messages"]), after
    assert not any("Biscuit" in m for m in before["messages"] + before["memories"]), before
    assert after["memories"], ("Mem0 extracted no memory from the haystack", mem0_answers(got.calls["cat"]))
    # Every turn recalled and stored without a failure, the harness says.
    for key in ("cat", "city", "cat-br"):
        assert all(t.memory.system == "mem0" and not t.memory.error for t in got.turns[key]), got.turns[key]
        assert all(t.memory.store_ms > 0 for t in got.turns[key])
    # The question recalled what was stored, and the prompt carries it (the branch too:
    # it started from the snapshot's store).
    for key in ("cat", "cat-br"):
        question = got.turns[key][-1]
        assert question.round_id == CAT
        assert set(question.memory.recalled) & set(after["memories"]), (question.memory, after)
        prompt = question_prompt(got.calls[key])
        assert RECALL_HEADING in prompt and question.memory.recalled[0][:200] in prompt, prompt[-1500:]
    # Nothing leaks between the two runs: neither memory system ever saw the other's story.
    assert not any("Biscuit" in _texts(c["request"]) for c in got.calls["city"])
    assert not any("Porto" in _texts(c["request"]) for c in got.calls["cat"] + got.calls["cat-br"])


async def hindsight_memories(run_id: str, bank: str = "agent") -> list[str]:
    """Every memory in the running sandbox's Hindsight bank, read through its own API."""

    async def sh(*argv: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        assert proc.returncode == 0, out.decode()
        return out.decode()

    container = (await sh("docker", "ps", "-q", "--filter", f"label=sclate.run={run_id}")).split()[0]
    script = (
        "import urllib.request;print(urllib.request.urlopen("
        f"'http://127.0.0.1:8888/v1/default/banks/{bank}/memories/list?limit=500', timeout=30).read().decode())"
    )
    listed: Any = json.loads(await sh("docker", "exec", container, "python3", "-c", script))
    items: list[Any] = (listed.get("items") or listed.get("results") or []) if isinstance(listed, dict) else listed
    return [str(i.get("text", "")) for i in items if isinstance(i, dict) and i.get("text")]


def check_hindsight_runs(got: MemoryRuns) -> None:
    """What every pair with Hindsight shows: no failed turn, every memory call accounted
    for, the cat session in Hindsight's own store (its API over PostgreSQL) only once it
    happened, and nothing of one run in the other's prompts."""
    assert got.errors == [], got.errors
    for key in got.runs:
        check_accounting(got.runs[key], got.calls[key], "hindsight")
        assert all(t.memory.system == "hindsight" and not t.memory.error for t in got.turns[key]), got.turns[key]
    before, after = got.live["before-cat"], got.live["after-cat"]
    assert any("Biscuit" in m for m in after), after
    assert not any("Biscuit" in m for m in before), before
    if "city" in got.runs:
        assert not any("Biscuit" in _texts(c["request"]) for c in got.calls["city"])
        assert not any("Porto" in _texts(c["request"]) for c in got.calls["cat"] + got.calls["cat-br"])


async def test_reference_harness_with_hindsight(tmp_path: Path) -> None:
    got = await run_pair(
        tmp_path,
        "reference",
        "hindsight",
        {"max_steps": 1, "max_tokens": 64, "turn_timeout_s": 600},
        read_live=hindsight_memories,
        neighbour=False,
    )
    check_hindsight_runs(got)
    for key in ("cat", "cat-br"):
        question = got.turns[key][-1]
        assert question.round_id == CAT
        assert any("Biscuit" in r for r in question.memory.recalled), question.memory
        assert RECALL_HEADING in question_prompt(got.calls[key])


async def hermes_memories(run_id: str) -> list[str]:
    return await hindsight_memories(run_id, "hermes")


HINDSIGHT_HERMES_HEADING = "Relevant memories from past conversations"
"""How hindsight-hermes 0.5.0 opens what it recalled (its default ``recallPromptPreamble``)."""


async def test_hermes_with_hindsight(tmp_path: Path) -> None:
    """Hindsight's own Hermes plugin: its pre_llm_call recall reaches the question's
    message, its post_llm_call retain fills the bank ``hermes``."""
    got = await run_pair(
        tmp_path,
        "hermes",
        "hindsight",
        {"max_tokens": 64, "max_turns": 2, "turn_timeout_s": 600},
        read_live=hermes_memories,
        neighbour=False,
    )
    check_hindsight_runs(got)
    for key in ("cat", "cat-br"):
        assert got.turns[key][-1].round_id == CAT
        # The plugin adds what it recalled to the question's message (Hermes puts
        # plugin context in the user message, not the system prompt).
        agent = [c for c in got.calls[key] if c["role"] == "agent"]
        user = [m for m in agent[-1]["request"]["messages"] if m.get("role") == "user"]
        asked = next((_texts(m) for m in user if HINDSIGHT_HERMES_HEADING in _texts(m)), "")
        assert asked, _texts(user)[-2000:]
        # In the recalled block itself (Hermes's own MEMORY.md is in the system prompt).
        assert "Biscuit" in asked[asked.index(HINDSIGHT_HERMES_HEADING) :], asked[-2000:]
