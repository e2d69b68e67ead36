"""The host side of the bridges' JSON-lines protocol (adapters._bridge), over a test double channel."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import pytest

from adapters import ExecOutput, LineChannel
from adapters._bridge import BridgeDriver, turn_result
from sclated.errors import FailedPrecondition, Unavailable


class ScriptedChannel:
    """A test double of LineChannel: answers each sent line with scripted lines."""

    def __init__(self, answers: list[list[str]]) -> None:
        self.answers = answers
        self.sent: list[dict[str, object]] = []
        self.pending: list[str] = []
        self.closed = False

    async def send(self, line: str) -> None:
        self.sent.append(json.loads(line))
        self.pending.extend(self.answers.pop(0) if self.answers else [])

    async def readline(self) -> str:
        return self.pending.pop(0) if self.pending else ""

    async def close(self) -> None:
        self.closed = True


class ScriptedAccess:
    """A test double of SandboxAccess: a fixed setup output and one scripted channel."""

    def __init__(self, setup: ExecOutput, channel: ScriptedChannel) -> None:
        self.setup, self.channel = setup, channel

    async def exec(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 120.0
    ) -> ExecOutput:
        return self.setup

    async def open_channel(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> LineChannel:
        return self.channel


def _line(**kw: object) -> str:
    return json.dumps(kw)


async def test_a_turn_skips_stray_lines_and_keeps_the_first_received() -> None:
    channel = ScriptedChannel(
        [
            [
                "not json",
                "[1]",
                _line(type="received", seq=3, wall_ns=10, mono_ns=20),
                _line(type="received", seq=9, wall_ns=99, mono_ns=99),
                _line(type="turn_end", reply="hello", error="slow"),
            ]
        ]
    )
    driver = BridgeDriver("Thing", "/opt/bridge.py")
    await driver.open(ScriptedAccess(ExecOutput(0, "{}"), channel))  # type: ignore[arg-type]
    answer = await driver.message({"text": "hi"}, 5)
    assert channel.sent == [{"type": "message", "text": "hi"}]
    result = turn_result(answer, {"k": 1})
    assert result.reply == "hello" and result.received_seq == 3 and result.received_sim_ns == 10
    assert result.received_wall_ns == 20 and result.details == {"k": 1, "error": "slow"}


async def test_errors_name_the_harness() -> None:
    driver = BridgeDriver("Thing", "/opt/bridge.py")
    with pytest.raises(FailedPrecondition, match="the Thing harness is not started"):
        await driver.start_session("s")
    channel = ScriptedChannel([[_line(type="error", error="no such session")], []])
    await driver.open(ScriptedAccess(ExecOutput(0, "{}"), channel))  # type: ignore[arg-type]
    with pytest.raises(FailedPrecondition, match="Thing bridge refused a request: no such session"):
        await driver.start_session("s")
    with pytest.raises(Unavailable, match="Thing bridge closed its output while sclate waited for 'session_stopped'"):
        await driver.stop_session()
    await driver.close()
    assert channel.closed and not driver.open_now


@pytest.mark.parametrize(
    "setup, why",
    [
        (ExecOutput(0, 'log\n{"type": "setup", "errors": ["bad config"]}'), "bad config"),
        (ExecOutput(2, "Traceback: boom"), "Traceback: boom"),
    ],
)
async def test_a_failed_setup_says_why(setup: ExecOutput, why: str) -> None:
    driver = BridgeDriver("Thing", "/opt/bridge.py")
    with pytest.raises(FailedPrecondition, match=f"Thing setup in the sandbox failed: {why}"):
        await driver.setup(ScriptedAccess(setup, ScriptedChannel([])))  # type: ignore[arg-type]


async def test_a_ready_line_with_errors_fails_the_start() -> None:
    channel = ScriptedChannel([])
    channel.pending = [_line(type="ready", errors=["gateway down"])]
    driver = BridgeDriver("Thing", "/opt/bridge.py")
    with pytest.raises(FailedPrecondition, match="Thing did not start in the sandbox: gateway down"):
        await driver.open(ScriptedAccess(ExecOutput(0, "{}"), channel), ready_timeout_s=5)  # type: ignore[arg-type]
