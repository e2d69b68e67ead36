"""A repository's SWE-bench instances as consecutive simulated working days.

The instances of one repository, oldest ``created_at`` first, are the arc: a few
per working day (``per_day``, default 2, at 09:00 and then every ``spacing_h``
hours), starting on the first instance's date. Each instance is one session: the
workspace is emptied (the harness's own memory files stay), the repository is
seeded at the instance's commit into ``/workspace/<name>``, the issue is
delivered, and once the agent's turn ended its change is graded in the
instance's environment. The harness's memory carries over from one instance to
the next. The next instance starts at its slot or when the previous one stopped,
whichever is later.

Event ids (``<i>`` is the instance id)::

    swe:<i>:start   At(slot)                 AgentControl(start): fresh workspace, repository seeded
    swe:<i>:issue   When(session started)    DeliverPrompt(issue, round_id=<i>)
    swe:<i>:grade   When(turn ended)         Grade(<i>)
    swe:<i>:stop    When(graded)             AgentControl(stop)
    swe:end         After(last stop)         StopRun
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from adapters import Capability, GradeContext, RoundInfo, Verdict
from adapters.swebench._environment import SWEEnvironment
from adapters.swebench._grading import APPLY_PATCH_FAIL, apply_patch, git, run_eval
from adapters.swebench._instances import SWEInstance
from sclated.errors import FailedPrecondition, NotFound, SclateError
from sclated.scheduler import (
    After,
    AgentControl,
    At,
    DeliverPrompt,
    EventSource,
    EventSpec,
    Grade,
    Snapshot,
    StopRun,
    When,
)

__all__ = ["SWEScenario", "SWESource", "working_slots"]

_WORKSPACE = "/workspace"


def working_slots(first: dt.date, count: int, *, per_day: int, spacing_h: float) -> list[dt.datetime]:
    """``count`` start times: ``per_day`` a day from 09:00 UTC, weekdays only, from ``first``."""
    day = first
    while day.weekday() >= 5:
        day += dt.timedelta(days=1)
    out: list[dt.datetime] = []
    while len(out) < count:
        for k in range(per_day):
            if len(out) == count:
                break
            start = dt.datetime.combine(day, dt.time(9, 0), tzinfo=dt.UTC)
            out.append(start + dt.timedelta(hours=spacing_h * k))
        day += dt.timedelta(days=1)
        while day.weekday() >= 5:
            day += dt.timedelta(days=1)
    return out


def _ns(when: dt.datetime) -> int:
    return int(when.timestamp()) * 1_000_000_000


def issue_prompt(inst: SWEInstance, dest: str, when: dt.datetime, *, hints: bool) -> str:
    parts = [
        f"A new issue was filed on {inst.repo} ({inst.created_at:%Y-%m-%d}):",
        "",
        inst.problem_statement.strip(),
    ]
    if hints and inst.hints_text.strip():
        parts += ["", "Hints from the discussion:", inst.hints_text.strip()]
    parts += [
        "",
        "---",
        f"The repository is checked out at {dest} (commit {inst.base_commit[:12]}); today is "
        f"{when:%A %Y-%m-%d}. Resolve the issue by editing the repository's non-test files in place. "
        "The repository's own tests, including new ones you cannot see, decide whether it is resolved; "
        "do not edit the existing tests. When you are done, reply with a short summary of your change.",
    ]
    return "\n".join(parts)


def _turn_ended(snap: Snapshot, round_id: str) -> bool:
    return any(
        a.kind == "turn_end" and a.actor == "agent" and a.data.get("round_id") == round_id
        for a in reversed(snap.actions)
    )


def _ended(round_id: str) -> Callable[[Snapshot], bool]:
    return lambda snap: _turn_ended(snap, round_id)


def _session_ready(start_id: str) -> Callable[[Snapshot], bool]:
    """The start fired and its control is done (the repository is in the workspace):
    the issue is due then, so seeding the workspace is not counted as delivery delay."""

    def ready(snap: Snapshot) -> bool:
        return snap.fired_at(start_id) is not None and any(
            a.kind == "session_started" and a.actor == "agent" and a.data.get("event_id") == start_id
            for a in snap.actions
        )

    return ready


def _graded(check_id: str) -> Callable[[Snapshot], bool]:
    return lambda snap: check_id in snap.grades


class SWESource:
    def __init__(self, scenario: SWEScenario) -> None:
        self._scenario = scenario
        self._emitted: set[str] = set()

    @property
    def name(self) -> str:
        return self._scenario.name

    def _emit(self, out: list[EventSpec], spec: EventSpec) -> None:
        if spec.id not in self._emitted:
            self._emitted.add(spec.id)
            out.append(spec)

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        sc = self._scenario
        out: list[EventSpec] = []
        prev_stop: str | None = None
        for inst, slot in zip(sc.instances, sc.slots, strict=True):
            if prev_stop is not None and snapshot.fired_at(prev_stop) is None:
                return out
            iid = inst.instance_id
            start, issue, grade, stop = (f"swe:{iid}:{step}" for step in ("start", "issue", "grade", "stop"))
            dest = sc.dest(inst)
            self._emit(
                out,
                EventSpec(
                    start,
                    At(max(_ns(slot), snapshot.now_ns)),
                    (AgentControl("start"),),
                    data={
                        "session": iid,
                        "phase": "start",
                        "workspace_fresh": True,
                        "workspace_seed": str(sc.checkout(iid)),
                        "workspace_dest": dest,
                    },
                ),
            )
            self._emit(
                out,
                EventSpec(
                    issue,
                    When(_session_ready(start), f"{iid}'s repository is in the workspace"),
                    (DeliverPrompt(issue_prompt(inst, dest, slot, hints=sc.hints), session=iid, round_id=iid),),
                    data={"session": iid, "round_id": iid, "phase": "issue"},
                ),
            )
            self._emit(
                out,
                EventSpec(
                    grade,
                    When(_ended(iid), f"turn {iid} ended"),
                    (Grade(iid, spec={"repo": inst.repo}),),
                    data={"round_id": iid, "phase": "grade"},
                ),
            )
            self._emit(
                out,
                EventSpec(stop, When(_graded(iid), f"{iid} graded"), (AgentControl("stop"),), data={"phase": "stop"}),
            )
            prev_stop = stop
        if prev_stop is not None:
            self._emit(
                out,
                EventSpec(
                    "swe:end",
                    After((prev_stop,)),
                    (StopRun(reason=f"{len(sc.instances)} SWE-bench instance(s) graded"),),
                    data={"phase": "end"},
                ),
            )
        return out


class SWEScenario:
    """One repository's instances (implements :class:`adapters.Scenario`)."""

    def __init__(
        self,
        benchmark: str,
        instances: Sequence[SWEInstance],
        environment: SWEEnvironment,
        *,
        per_day: int = 2,
        spacing_h: float = 4.0,
        hints: bool = False,
        eval_timeout_s: float = 1800.0,
    ) -> None:
        self.benchmark = benchmark
        self.instances = tuple(instances)
        self._environment = environment
        self.hints = hints
        self.eval_timeout_s = eval_timeout_s
        self.slots = working_slots(
            self.instances[0].created_at.date(), len(self.instances), per_day=per_day, spacing_h=spacing_h
        )
        self._source: SWESource | None = None
        self._by_id = {i.instance_id: i for i in self.instances}

    @property
    def name(self) -> str:
        return f"{self.benchmark}:{self.instances[0].repo}"

    @property
    def start_ns(self) -> int:
        return _ns(self.slots[0])

    @property
    def rounds(self) -> Sequence[RoundInfo]:
        return [
            RoundInfo(i.instance_id, slot.date().isoformat(), "swe_instance")
            for i, slot in zip(self.instances, self.slots, strict=True)
        ]

    def sources(self) -> Sequence[EventSource]:
        if self._source is None:
            self._source = SWESource(self)
        return [self._source]

    @property
    def requires(self) -> Mapping[Capability, str]:
        return {Capability.WORKSPACE: "the repository is seeded into the workspace and the agent's change read from it"}

    @property
    def world(self) -> None:
        return None

    @property
    def environment(self) -> SWEEnvironment:
        return self._environment

    def workspace_seed(self) -> None:
        return None

    def dest(self, inst: SWEInstance) -> str:
        return f"{_WORKSPACE}/{inst.repo_name}"

    def checkout(self, instance_id: str) -> Path:
        prepared = self._environment.prepared.get(instance_id)
        if prepared is None:
            raise FailedPrecondition(f"instance {instance_id}'s environment was not prepared (the run did not open it)")
        return prepared.checkout

    async def grade(self, effect: Grade, ctx: GradeContext) -> Verdict:
        inst = self._by_id.get(effect.check_id)
        if inst is None:
            raise NotFound(f"scenario {self.name!r} has no instance {effect.check_id!r}")
        env = self._environment
        prepared = env.prepared[inst.instance_id]
        containers = env.containers
        assert containers is not None and env.root is not None
        out_dir = env.root / inst.instance_id
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="sclate-swe-agent-") as tmp:
            agent_copy = Path(tmp) / "repo"
            try:
                await ctx.export_from_workspace(self.dest(inst), agent_copy)
            except SclateError as exc:
                return Verdict(
                    inst.instance_id, 0.0, True, reason=f"the repository is gone from the workspace: {exc.message}",
                    details={"patch_bytes": 0, "resolved": False},
                )  # fmt: skip
            await git(agent_copy, "add", "-A")
            patch = await git(agent_copy, "diff", "--cached", "--binary", prepared.head)
            files = [
                f for f in (await git(agent_copy, "diff", "--cached", "--name-only", prepared.head)).splitlines() if f
            ]
        await asyncio.to_thread(_write, out_dir / "patch.diff", patch)
        container = await containers.open(prepared.image, purpose="grade")
        try:
            if patch.strip():
                applied = await apply_patch(container, patch, env.apply_cmds)
            else:
                applied = None
            if applied is not None and not applied.applied:
                log = f"{applied.log}\n{APPLY_PATCH_FAIL}\n"
                timed_out = False
            else:
                log, timed_out = await run_eval(container, prepared.eval_script, timeout_s=self.eval_timeout_s)
        finally:
            await container.close()
        log_path = out_dir / "test_output.txt"
        await asyncio.to_thread(_write, log_path, log)
        report, version = await env.grader.report(prepared.row, patch, log_path)
        status = report.get("tests_status") or {}
        f2p = status.get("FAIL_TO_PASS") or {"success": [], "failure": list(inst.fail_to_pass)}
        p2p = status.get("PASS_TO_PASS") or {"success": [], "failure": list(inst.pass_to_pass)}
        resolved = bool(report.get("resolved"))
        if resolved:
            reason = f"resolved: {len(f2p['success'])} FAIL_TO_PASS and {len(p2p['success'])} PASS_TO_PASS tests pass"
        elif not patch.strip():
            reason = "not resolved: the agent changed nothing"
        elif applied is not None and not applied.applied:
            reason = "not resolved: the agent's patch did not apply"
        elif timed_out:
            reason = f"not resolved: the tests timed out after {self.eval_timeout_s:.0f} s"
        elif not report.get("patch_successfully_applied"):
            reason = "not resolved: the test log could not be parsed (tests errored or the test patch did not apply)"
        else:
            reason = (
                f"not resolved: FAIL_TO_PASS failing {f2p['failure'][:5]}; PASS_TO_PASS broken {p2p['failure'][:5]}"
            )
        return Verdict(
            inst.instance_id,
            1.0 if resolved else 0.0,
            True,
            reason=reason,
            details={
                "resolved": resolved,
                "repo": inst.repo,
                "image": prepared.image,
                "patch_bytes": len(patch.encode("utf-8", "surrogateescape")),
                "files_changed": files,
                "patch_applied": None if applied is None else applied.applied,
                "apply_command": None if applied is None else applied.command,
                "tests_timed_out": timed_out,
                "tests_status": json.loads(json.dumps(status)),
                "infra_failure": report.get("infra_failure", False),
                "log": str(log_path),
                "swebench": version,
                "grade_seconds": round(time.monotonic() - started, 2),
            },
        )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8", errors="surrogateescape")
    tmp.replace(path)
