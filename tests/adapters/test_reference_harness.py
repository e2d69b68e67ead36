"""The reference harness as a real subprocess against a fake OpenAI server (a test double)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shutil
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from adapters._base import ScenarioConfig
from adapters.metaclaw import MetaClawBenchmark
from adapters.reference_harness import (
    AGENT_PY,
    CRONTAB,
    HarnessCronSource,
    ReferenceHarnessAdapter,
    SubprocessTransport,
    parse_crontab,
)
from sclated.errors import InvalidArgument
from sclated.scheduler import AgentControl, DeliverPrompt, ExecInSandbox, Grade, Scheduler, StopRun
from tests.adapters._doubles import DoubleGradeContext

_NS = 1_000_000_000
Reply = dict[str, Any] | int  # a chat message, or an HTTP error status


def tool_call(name: str, args: dict[str, Any] | str, call_id: str = "call_1") -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


class FakeOpenAIServer:
    """Test double for an OpenAI-compatible endpoint: scripted replies, recorded requests."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.fallback: Reply = answer("(no more scripted replies)")
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        """When set, replies are computed from each request instead of the script."""
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                double.requests.append(body)
                double.headers.append({k.lower(): v for k, v in self.headers.items()})
                if double.responder is not None:
                    reply = double.responder(body)
                else:
                    reply = double.script.pop(0) if double.script else double.fallback
                if isinstance(reply, int):
                    payload = json.dumps({"error": {"message": "scripted failure"}}).encode()
                    self.send_response(reply)
                else:
                    payload = json.dumps(
                        {
                            "id": "x",
                            "object": "chat.completion",
                            "choices": [{"index": 0, "message": reply}],
                        }
                    ).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def model() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    ws, mem = tmp_path / "workspace", tmp_path / "memory"
    ws.mkdir()
    mem.mkdir()
    return ws, mem


def _env(model: FakeOpenAIServer, dirs: tuple[Path, Path], **extra: str) -> dict[str, str]:
    ws, mem = dirs
    return {
        "PATH": os.environ.get("PATH", ""),
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENT_WORKSPACE": str(ws),
        "AGENT_MEMORY_DIR": str(mem),
        "AGENT_HTTP_TIMEOUT": "20",
        **extra,
    }


@pytest.fixture
async def harness(
    model: FakeOpenAIServer, dirs: tuple[Path, Path]
) -> AsyncIterator[tuple[ReferenceHarnessAdapter, SubprocessTransport]]:
    transport = await SubprocessTransport.start(env=_env(model, dirs, AGENT_MAX_STEPS="3"))
    adapter = ReferenceHarnessAdapter(transport, turn_timeout_s=60)
    try:
        yield adapter, transport
    finally:
        assert await transport.close() == 0


def _today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


async def test_tool_call_then_answer_writes_file_and_note(
    harness: tuple[ReferenceHarnessAdapter, SubprocessTransport],
    model: FakeOpenAIServer,
    dirs: tuple[Path, Path],
) -> None:
    adapter, _ = harness
    ws, mem = dirs
    (ws / "USER.md").write_text("Sam likes Markdown notes.")
    (mem / "MEMORY.md").write_text("- Sam runs a bakery.\n")
    model.script = [
        tool_call("write_file", {"path": "notes/todo.md", "content": "- buy milk\n"}),
        answer("Done."),
    ]

    await adapter.start_session("day01")
    result = await adapter.deliver(
        DeliverPrompt("Create notes/todo.md containing milk", session="day01", round_id="day01/r1")
    )
    assert result.reply == "Done."
    assert result.details["steps"] == 1
    assert result.ended_ns >= result.started_ns
    assert result.received_wall_ns > 0
    assert (ws / "notes" / "todo.md").read_text() == "- buy milk\n"

    # Two model calls, attributed to the session and the round.
    assert len(model.requests) == 2
    for headers in model.headers:
        assert headers["x-sclate-thread"] == "day01"
        assert headers["x-sclate-turn"] == "day01/r1"
        assert headers["authorization"] == "Bearer test-key"
    first, second = model.requests
    assert [t["function"]["name"] for t in first["tools"]] == [
        "read_file",
        "write_file",
        "list_dir",
        "shell",
        "wait",
    ]
    system = first["messages"][0]["content"]
    assert "Sam runs a bakery." in system and "Sam likes Markdown notes." in system
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["content"].startswith("wrote 11 characters to notes/todo.md")

    # The turn left a dated note in memory.
    note = (mem / "notes" / f"{_today().isoformat()}.md").read_text()
    assert "[day01] asked: Create notes/todo.md containing milk | replied: Done." in note
    assert "wrote: notes/todo.md" in note

    # The session keeps its history for the next turn: the tool step too.
    model.script = [answer("Yes.")]
    await adapter.deliver(DeliverPrompt("Did you do it?", session="day01", round_id="day01/r2"))
    roles = [m["role"] for m in model.requests[-1]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    await adapter.stop_session()


def _extends(request: dict[str, Any], earlier: dict[str, Any], reply: dict[str, Any]) -> bool:
    """Whether a request's messages are an earlier request's, then its reply as the model sent it."""
    n = len(earlier["messages"])
    sent = request["messages"][n] if len(request["messages"]) > n else None
    return (
        request["messages"][:n] == earlier["messages"]
        and sent is not None
        and (
            sent["role"] == "assistant"
            and sent.get("content") == reply.get("content")
            and sent.get("tool_calls") == reply.get("tool_calls")
        )
    )


async def test_a_sessions_calls_extend_one_another(
    harness: tuple[ReferenceHarnessAdapter, SubprocessTransport],
    model: FakeOpenAIServer,
    dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    # Token-faithful rollouts need each call of a session to extend the one before
    # (the same system prompt and tools, the replies as sent, the tool steps kept).
    adapter, _ = harness
    replies = [
        tool_call("write_file", {"path": "a.md", "content": "one\n"}),
        answer("Wrote a.md."),
        tool_call("list_dir", {"path": "."}, call_id="call_2"),
        answer("  Only a.md.  "),
        answer("Nothing else."),
    ]
    model.script = list(replies)
    await adapter.start_session("day01")
    for k in range(3):
        await adapter.deliver(DeliverPrompt(f"task {k}", session="day01", round_id=f"day01/r{k}"))
    assert len(model.requests) == 5
    for i in range(1, 5):
        assert _extends(model.requests[i], model.requests[i - 1], replies[i - 1]), i
        assert model.requests[i]["messages"][0] == model.requests[0]["messages"][0]
        assert "tools" in model.requests[i]
    # The time and the text are in the user message, not in the system prompt.
    first_user = model.requests[0]["messages"][1]["content"]
    assert first_user.startswith("[") and " UTC]" in first_user and first_user.endswith("task 0")

    # Saved and restored (a snapshot, a branch): the next call still extends.
    await adapter.save_state(tmp_path / "state")
    await adapter.stop_session()
    await adapter.restore_state(tmp_path / "state")
    model.script = [answer("Back.")]
    await adapter.deliver(DeliverPrompt("task 3", session="day01", round_id="day01/r3"))
    assert _extends(model.requests[-1], model.requests[-2], replies[-1])

    # A new session gets a new system prompt (its notes are read again), not extending.
    model.script = [answer("Day two.")]
    await adapter.deliver(DeliverPrompt("task 4", session="day02", round_id="day02/r0"))
    assert model.requests[-1]["messages"][0] != model.requests[0]["messages"][0]
    assert "asked: task 0" in model.requests[-1]["messages"][0]["content"]
    assert [m["role"] for m in model.requests[-1]["messages"]] == ["system", "user"]


async def test_history_is_trimmed_by_whole_turns(model: FakeOpenAIServer, dirs: tuple[Path, Path]) -> None:
    transport = await SubprocessTransport.start(env=_env(model, dirs, AGENT_HISTORY_CHARS="400"))
    adapter = ReferenceHarnessAdapter(transport, turn_timeout_s=60)
    try:
        for k in range(4):
            model.script = [tool_call("write_file", {"path": f"f{k}.md", "content": "x" * 150}), answer(f"done {k}")]
            await adapter.deliver(DeliverPrompt(f"turn {k}", session="s", round_id=f"r{k}"))
        model.script = [answer("ok")]
        await adapter.deliver(DeliverPrompt("last", session="s", round_id="r4"))
        messages = model.requests[-1]["messages"]
        # Older turns are gone whole: the history starts at a turn's user message, and
        # every tool result follows the call it answers.
        assert messages[1]["role"] == "user" and "turn 0" not in messages[1]["content"]
        assert messages[-1]["content"].endswith("last")
        for i, m in enumerate(messages):
            if m["role"] == "tool":
                assert messages[i - 1]["role"] == "assistant" and messages[i - 1]["tool_calls"]
        assert len(messages) < 2 + 4 * 4
    finally:
        assert await transport.close() == 0


async def test_malformed_tool_calls_become_plain_answers(
    harness: tuple[ReferenceHarnessAdapter, SubprocessTransport],
    model: FakeOpenAIServer,
    dirs: tuple[Path, Path],
) -> None:
    adapter, _ = harness
    ws, _ = dirs
    unknown = '{"tool": "delete_everything", "args": {}}'
    missing = '{"tool": "write_file", "args": {"path": "x.txt"}}'
    model.script = [
        answer(unknown),
        tool_call("write_file", "{not json"),
        answer(missing),
        answer("```json\n{broken"),
        # Weak models' JSON-in-content call, in the {"name", "arguments"} shape: it is run.
        answer('Sure: {"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}'),
        answer("Wrote it."),
    ]
    replies = []
    for k in range(5):
        result = await adapter.deliver(DeliverPrompt(f"task {k}", session="s", round_id=f"r{k}"))
        replies.append((result.reply, result.details["steps"]))
    assert replies[0] == (unknown, 0)
    assert replies[1][1] == 0 and "{not json" in replies[1][0]
    assert replies[2] == (missing, 0)
    assert replies[3] == ("```json\n{broken", 0)
    assert replies[4] == ("Wrote it.", 1)
    assert not (ws / "x.txt").exists()
    assert (ws / "a.txt").read_text() == "x"
    # The content-JSON call's result goes back as a user message.
    assert model.requests[-1]["messages"][-1]["content"].startswith("Result of write_file:\nwrote 1")


async def test_tool_steps_are_capped(
    harness: tuple[ReferenceHarnessAdapter, SubprocessTransport],
    model: FakeOpenAIServer,
) -> None:
    adapter, _ = harness
    model.fallback = tool_call("list_dir", {"path": "."})
    result = await adapter.deliver(DeliverPrompt("loop forever", session="s", round_id="r"))
    # AGENT_MAX_STEPS=3: three tool rounds, then one call that must answer (the tools still
    # offered: they are part of the prompt the next call extends).
    assert result.details["steps"] == 3
    assert len(model.requests) == 4
    assert ["tools" in r for r in model.requests] == [True, True, True, True]
    assert model.requests[-1]["messages"][-1]["content"].startswith("You have used all your tool steps")
    assert "list_dir" in result.reply  # the stray call itself is the answer
    # The stray call stays in the history, answered as not run: the conversation stays well formed.
    model.fallback = answer("ok")
    await adapter.deliver(DeliverPrompt("next", session="s", round_id="r2"))
    roles = [m["role"] for m in model.requests[-1]["messages"]]
    assert roles[-3:] == ["assistant", "tool", "user"]
    assert model.requests[-1]["messages"][-2]["content"] == "not run: the turn ended here"


async def test_shell_tool_runs_in_workspace_with_timeout(model: FakeOpenAIServer, dirs: tuple[Path, Path]) -> None:
    transport = await SubprocessTransport.start(env=_env(model, dirs, AGENT_SHELL_TIMEOUT="1"))
    adapter = ReferenceHarnessAdapter(transport, turn_timeout_s=60)
    try:
        model.script = [
            tool_call("shell", {"command": "pwd && echo hi > made.txt"}),
            answer("ok"),
            tool_call("shell", {"command": "echo start; exec python3 -c 'import time; time.sleep(30)'"}),
            answer("gave up"),
        ]
        await adapter.deliver(DeliverPrompt("run it", session="s", round_id="a"))
        assert (dirs[0] / "made.txt").read_text() == "hi\n"
        assert model.requests[1]["messages"][-1]["content"].strip() == str(dirs[0])
        result = await adapter.deliver(DeliverPrompt("hang", session="s", round_id="b"))
        assert result.reply == "gave up"
        assert "[timed out after 1s; killed]" in model.requests[3]["messages"][-1]["content"]
    finally:
        await transport.close()


async def test_model_failure_ends_the_turn_without_crashing(
    harness: tuple[ReferenceHarnessAdapter, SubprocessTransport],
    model: FakeOpenAIServer,
    tmp_path: Path,
) -> None:
    adapter, _ = harness
    model.script = [500]
    result = await adapter.deliver(DeliverPrompt("hello", session="s", round_id="r"))
    assert result.reply == ""
    assert "HTTP 500" in result.details["error"]
    # Still alive, and its session state survives a save/restore round trip.
    model.script = [answer("fine")]
    assert (await adapter.deliver(DeliverPrompt("again", session="s", round_id="r2"))).reply == "fine"
    await adapter.save_state(tmp_path / "state")
    saved = json.loads((tmp_path / "state" / "reference_harness_state.json").read_text())
    assert saved["session"] == "s" and saved["history"][-1] == {
        "role": "assistant",
        "content": "fine",
    }
    await adapter.stop_session()
    await adapter.restore_state(tmp_path / "state")
    model.script = [answer("restored")]
    await adapter.deliver(DeliverPrompt("after restore", session="s", round_id="r3"))
    hello, failed = model.requests[-1]["messages"][1:3]
    assert hello["content"].endswith("\nhello") and failed == {"role": "assistant", "content": ""}


async def _run_agent(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(AGENT_PY),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_consolidate_folds_past_notes_into_memory(model: FakeOpenAIServer, dirs: tuple[Path, Path]) -> None:
    _, mem = dirs
    env = _env(model, dirs)
    yesterday = _today() - dt.timedelta(days=1)
    (mem / "notes").mkdir()
    (mem / "notes" / f"{yesterday.isoformat()}.md").write_text("- 09:05 [day01] asked: buy milk\n")
    (mem / "notes" / f"{_today().isoformat()}.md").write_text("- 00:10 [day02] asked: later\n")
    (mem / "MEMORY.md").write_text("- Sam runs a bakery.\n")
    model.script = [answer("```markdown\n- Sam runs a bakery.\n- Sam needed milk.\n```")]

    code, out, _ = await _run_agent(env, "consolidate")
    assert code == 0 and "consolidated 1 day(s)" in out
    assert (mem / "MEMORY.md").read_text() == "- Sam runs a bakery.\n- Sam needed milk.\n"
    (request,) = model.requests
    assert "tools" not in request
    prompt = request["messages"][0]["content"]
    assert "buy milk" in prompt and "Sam runs a bakery." in prompt and "later" not in prompt
    assert model.headers[0]["x-sclate-thread"] == f"consolidate-{_today().isoformat()}"

    # Already folded: nothing to do, no model call.
    code, out, _ = await _run_agent(env, "consolidate")
    assert code == 0 and "nothing to consolidate" in out
    assert len(model.requests) == 1


async def test_consolidate_keeps_memory_when_the_model_fails(model: FakeOpenAIServer, dirs: tuple[Path, Path]) -> None:
    _, mem = dirs
    (mem / "notes").mkdir()
    (mem / "notes" / "2020-01-01.md").write_text("- old note\n")
    (mem / "MEMORY.md").write_text("keep me\n")
    model.script = [503]
    code, _, err = await _run_agent(_env(model, dirs), "consolidate")
    assert code == 1 and "memory unchanged" in err
    assert (mem / "MEMORY.md").read_text() == "keep me\n"


async def test_once_mode_prints_the_reply(model: FakeOpenAIServer, dirs: tuple[Path, Path]) -> None:
    model.script = [answer("Hello Sam.")]
    code, out, _ = await _run_agent(_env(model, dirs), "once", "say hello")
    assert (code, out) == (0, "Hello Sam.\n")
    (asked,) = [m for m in model.requests[0]["messages"] if m["role"] == "user"]
    assert asked["content"].startswith("[") and asked["content"].endswith(" UTC]\nsay hello")


async def test_serve_reports_bad_requests_and_keeps_going(
    harness: tuple[ReferenceHarnessAdapter, SubprocessTransport],
) -> None:
    _, transport = harness
    await transport.send("not json")
    assert json.loads(await transport.readline())["type"] == "error"
    await transport.send(json.dumps({"type": "bogus"}))
    assert "bogus" in json.loads(await transport.readline())["error"]
    await transport.send(json.dumps({"type": "ping"}))
    assert json.loads(await transport.readline()) == {"type": "pong"}


# -- the crontab as an event source -------------------------------------------------------------


def _daily_at(hour: int) -> Callable[[str, int], int]:
    """A next_fire double for ``0 <hour> * * *`` only."""

    def next_fire(expr: str, after_ns: int) -> int:
        assert expr == f"0 {hour} * * *"
        day = after_ns // (86400 * _NS) * 86400 * _NS
        t = day + hour * 3600 * _NS
        return t if t > after_ns else t + 86400 * _NS

    return next_fire


def test_crontab_parsing() -> None:
    lines = parse_crontab(CRONTAB.read_text())
    assert [(ln.expr, ln.command) for ln in lines] == [("0 2 * * *", "python3 /opt/agent/agent.py consolidate")]
    assert parse_crontab("SHELL=/bin/sh\n@daily echo hi\n# c\n")[0].expr == "@daily"
    with pytest.raises(InvalidArgument, match="line 1"):
        parse_crontab("0 2 * *\n")


def _drive_cron(source: HarnessCronSource, start_ns: int, until_ns: int) -> list[tuple[int, ExecInSandbox]]:
    sched = Scheduler(start_ns=start_ns, sources=[source])
    fired: list[tuple[int, ExecInSandbox]] = []
    while (due := sched.next_due_ns()) is not None and due <= until_ns:
        rec = sched.pop_due(due)
        assert rec is not None
        effect = rec.effects[0]
        assert isinstance(effect, ExecInSandbox)
        fired.append((rec.fired_ns, effect))
    return fired


def test_cron_source_fires_nightly_in_simulated_time() -> None:
    start = int(dt.datetime(2026, 3, 16, 9, 0, tzinfo=dt.UTC).timestamp()) * _NS
    source = HarnessCronSource(parse_crontab(CRONTAB.read_text()), _daily_at(2), name="harness:cron")
    fired = _drive_cron(source, start, start + 3 * 86400 * _NS)
    times = [dt.datetime.fromtimestamp(t / _NS, tz=dt.UTC) for t, _ in fired]
    assert times == [dt.datetime(2026, 3, d, 2, 0, tzinfo=dt.UTC) for d in (17, 18, 19)]
    assert all(e.command == "python3 /opt/agent/agent.py consolidate" and e.holder == "cron" for _, e in fired)


def test_adapter_routines_use_the_runtime_cron_parser() -> None:
    pytest.importorskip("sclated.runtime", reason="sclated.runtime (cron parser) not importable")

    class NoTransport:
        async def send(self, line: str) -> None:
            raise AssertionError("routines() must not talk to the harness")

        async def readline(self) -> str:
            raise AssertionError("routines() must not talk to the harness")

    (source,) = ReferenceHarnessAdapter(NoTransport(), name="ref").routines()
    assert source.name == "ref:cron"
    assert isinstance(source, HarnessCronSource)
    start = int(dt.datetime(2026, 3, 16, 9, 0, tzinfo=dt.UTC).timestamp()) * _NS
    fired = _drive_cron(source, start, start + 2 * 86400 * _NS)
    assert [dt.datetime.fromtimestamp(t / _NS, tz=dt.UTC).hour for t, _ in fired] == [2, 2]


# -- end to end: the tiny MetaClaw scenario through the real harness -----------------------------


async def test_tiny_metaclaw_through_the_harness(
    model: FakeOpenAIServer, dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, _ = dirs
    scenario = MetaClawBenchmark().load(ScenarioConfig(scenario="tiny", options={"seed_dir": str(tmp_path / "seed")}))
    seed = scenario.workspace_seed()
    assert seed is not None
    shutil.copytree(seed, ws, dirs_exist_ok=True)

    def respond(body: dict[str, Any]) -> Reply:
        # A weak model's behaviour: a write for the todo task, then \bbox{A,C} for everything.
        last = body["messages"][-1]
        if last["role"] == "user" and "create the file notes/todo.md" in str(last["content"]):
            return tool_call("write_file", {"path": "notes/todo.md", "content": "milk\n"})
        return answer(r"\bbox{A,C}")

    model.responder = respond

    transport = await SubprocessTransport.start(env=_env(model, dirs))
    adapter = ReferenceHarnessAdapter(transport, turn_timeout_s=60)
    ctx = DoubleGradeContext(ws)
    sched = Scheduler(start_ns=scenario.start_ns, sources=scenario.sources())
    try:
        stopped = False
        while not stopped and (due := sched.next_due_ns()) is not None:
            rec = sched.pop_due(max(due, sched.now_ns))
            assert rec is not None
            for effect in rec.effects:
                if isinstance(effect, AgentControl) and effect.action == "start":
                    shutil.copytree(rec.data["workspace_seed"], ws, dirs_exist_ok=True)
                    await adapter.start_session(rec.data["session"])
                elif isinstance(effect, AgentControl) and effect.action == "stop":
                    await adapter.stop_session()
                elif isinstance(effect, DeliverPrompt):
                    result = await adapter.deliver(effect)
                    assert effect.round_id is not None
                    ctx.replies[effect.round_id] = result.reply
                    sched.apply_action("agent", "turn_end", {"round_id": effect.round_id})
                elif isinstance(effect, Grade):
                    sched.apply_grade(effect.check_id, await scenario.grade(effect, ctx))
                elif isinstance(effect, StopRun):
                    stopped = True
    finally:
        await transport.close()
    assert stopped
    scores = {rid: v.score for rid, v in sched.snapshot().grades.items()}
    assert scores["day01/r1"] == 1.0  # the harness wrote the file the check looks for
    assert scores["day01/r2"] == 1.0 and scores["day02/r2"] == 1.0
    assert scores["day02/r1"] == 0.0 and scores["day03/r1"] == 0.0
    assert (ws / "day02" / "shopping.txt").is_file()  # day seeds arrived each morning
