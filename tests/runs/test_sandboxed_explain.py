"""A harness that fails because its sandbox died says so first (found by `sclated bench
faults`: a killed container, or a killed harness process, failed the run with "the
harness closed its output while sclate waited for 'turn_end'", which names neither)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from adapters.reference_harness import ReferenceHarness
from sclated.errors import FailedPrecondition, SclateError
from sclated.runs._sandboxed import SandboxedAgent
from sclated.sandbox import SandboxOptions, SandboxSession
from sclated.scheduler import DeliverPrompt


class ExplainingSession:
    """Test double of the SandboxSession's explain(): what a dead sandbox would say."""

    def __init__(self, why: str | None) -> None:
        self.why = why

    async def explain(self) -> str | None:
        return self.why


def _agent(why: str | None) -> SandboxedAgent:
    agent = SandboxedAgent(ReferenceHarness({}), SandboxOptions(), None)
    # Not started: its harness fails any request, as one whose process died does.
    agent._session = cast(SandboxSession, ExplainingSession(why))
    return agent


@pytest.mark.parametrize("call", ["deliver", "start_session"])
async def test_the_sandbox_s_own_account_comes_first(call: str) -> None:
    agent = _agent("the sandbox's container 0123456789ab exited, exit code 137 (killed by SIGKILL)")
    args: Any = DeliverPrompt("hi") if call == "deliver" else "s1"
    with pytest.raises(FailedPrecondition) as info:
        await getattr(agent, call)(args)
    assert info.value.message.startswith("the sandbox's container 0123456789ab exited, exit code 137")
    assert "not started" in info.value.message  # the harness's own words follow


async def test_a_failure_the_sandbox_cannot_explain_is_left_as_it_is() -> None:
    with pytest.raises(SclateError) as info:
        await _agent(None).deliver(DeliverPrompt("hi"))
    assert info.value.reason == "NOT_STARTED"


class TimingOutHarness(ReferenceHarness):
    """Test double: a harness whose turn limit ran out (asyncio.timeout raises a bare TimeoutError)."""

    async def deliver(self, prompt: DeliverPrompt) -> Any:
        raise TimeoutError


async def test_a_turn_that_times_out_says_so_not_an_empty_timeout_error() -> None:
    # Seen in a run under load: its reason was "TimeoutError: ", which names nothing.
    agent = SandboxedAgent(TimingOutHarness({}), SandboxOptions(), None)
    agent._session = cast(SandboxSession, ExplainingSession(None))
    with pytest.raises(FailedPrecondition) as info:
        await agent.deliver(DeliverPrompt("hi"))
    assert info.value.reason == "TURN_TIMEOUT"
    assert "'reference'" in info.value.message and "turn_timeout_s" in info.value.message
