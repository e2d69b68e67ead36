"""Test doubles for adapter tests: a grading context and a scheduler driver.

``DoubleGradeContext`` stands in for the run's grading context: it runs
commands in a local temp workspace (with ``python`` on PATH, as the sandbox
image provides) and answers judge prompts from a script. ``drive`` plays the
run loop's part against a real :class:`Scheduler`: it fires due events in
order, lets a fake agent answer prompts (recording ``turn_end`` actions as the
run does), and applies grades the scenario computes.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from adapters._base import JudgeReply, Scenario, Verdict
from sclated.scheduler import (
    AgentControl,
    DeliverPrompt,
    FireRecord,
    Grade,
    Scheduler,
    StopRun,
)

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
METACLAW_SMALL = SHARED_DATA / "metaclaw-bench-small"


class DoubleGradeContext:
    """A GradeContext test double: local workspace, recorded replies, scripted judge."""

    def __init__(self, workspace: Path, judge_answers: list[str] | None = None) -> None:
        self.workspace = workspace
        self.replies: dict[str, str] = {}
        self.judge_prompts: list[str] = []
        self._judge_answers = list(judge_answers or [])
        self.commands: list[str] = []
        bin_dir = workspace.parent / f"{workspace.name}-bin"
        bin_dir.mkdir(exist_ok=True)
        python = bin_dir / "python"
        if not python.exists():
            python.symlink_to(sys.executable)
        self._env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    async def exec_in_workspace(self, command: str, *, timeout_s: float = 120.0) -> tuple[int, str]:
        self.commands.append(command)
        proc = await asyncio.create_subprocess_shell(
            command,
            cwd=self.workspace,
            env=self._env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        assert proc.returncode is not None
        return proc.returncode, out.decode(errors="replace")

    async def export_from_workspace(self, src: str, dest: Path) -> None:
        """``src`` is read relative to the local workspace (``/workspace`` is its root)."""
        relative = src.removeprefix("/workspace").lstrip("/")
        await asyncio.to_thread(shutil.copytree, self.workspace / relative, dest, symlinks=True)

    def reply_for(self, round_id: str) -> str | None:
        return self.replies.get(round_id)

    async def judge(self, prompt: str) -> JudgeReply:
        self.judge_prompts.append(prompt)
        text = self._judge_answers.pop(0) if self._judge_answers else "no"
        return JudgeReply(text=text, endpoint="test-double", model="scripted", embedded=False)


@dataclass
class DriveLog:
    fires: list[FireRecord] = field(default_factory=list)
    prompts: list[tuple[int, DeliverPrompt]] = field(default_factory=list)
    controls: list[tuple[int, AgentControl, str]] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    stopped: bool = False


async def drive(
    scenario: Scenario,
    ctx: DoubleGradeContext,
    reply: Callable[[DeliverPrompt], str],
    *,
    turn_ns: int = 45 * 1_000_000_000,
    max_fires: int = 10_000,
) -> tuple[Scheduler, DriveLog]:
    """Run ``scenario`` to its StopRun with a fake agent that answers with ``reply``."""
    sched = Scheduler(start_ns=scenario.start_ns, sources=scenario.sources())
    log = DriveLog()
    while not log.stopped and len(log.fires) < max_fires:
        due = sched.next_due_ns()
        if due is None:
            break
        rec = sched.pop_due(max(due, sched.now_ns))
        assert rec is not None
        log.fires.append(rec)
        for effect in rec.effects:
            if isinstance(effect, DeliverPrompt):
                log.prompts.append((rec.fired_ns, effect))
                text = reply(effect)
                assert effect.round_id is not None
                ctx.replies[effect.round_id] = text
                # The turn takes time; the run records its end as an agent action.
                sched.advance(sched.now_ns + turn_ns)
                sched.apply_action("agent", "turn_end", {"round_id": effect.round_id})
            elif isinstance(effect, Grade):
                verdict = await scenario.grade(effect, ctx)
                log.verdicts[effect.check_id] = verdict
                sched.apply_grade(effect.check_id, verdict)
            elif isinstance(effect, AgentControl):
                log.controls.append((rec.fired_ns, effect, rec.event_id))
                if effect.action == "start":
                    # As the run does once the agent's session is ready.
                    sched.apply_action("agent", "session_started", {"event_id": rec.event_id})
            elif isinstance(effect, StopRun):
                log.stopped = True
    return sched, log
