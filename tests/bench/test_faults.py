"""`sclated bench faults`' conclusions from what it saw, each able to come out bad (the
bench itself runs real daemons, sandboxes and the model: not a test)."""

from __future__ import annotations

import pytest

from sclated.bench._faults import PHASES, SANDBOX_FAULTS
from sclated.bench._faults_check import (
    CLEAR_WORDS,
    TARGETS,
    Acknowledged,
    CaseOutcome,
    StreamEvent,
    classify,
    ended_for,
    figures,
    held_leases,
    leases_expired,
    leases_held_at_end,
    reason_names_fault,
    records_lost,
    turn_left_unleased,
)


def state(seq: int, name: str, reason: str = "") -> StreamEvent:
    return StreamEvent(seq, "state", f"state {seq}".encode(), state=name, reason=reason)


def lease(seq: int, name: str, change: str) -> StreamEvent:
    return StreamEvent(seq, "lease", f"lease {seq}".encode(), lease=name, change=change)


def turn_ended(seq: int) -> StreamEvent:
    return StreamEvent(seq, "turn", f"turn {seq}".encode(), phase="ended")


def test_every_fault_has_words_and_a_reason_must_name_it() -> None:
    assert set(CLEAR_WORDS) >= {*SANDBOX_FAULTS, "daemon_kill", "disk_full", "model_kill_stream"}
    assert reason_names_fault(
        "container_kill", "the sandbox's container 0123 exited, exit code 137 (killed by SIGKILL)"
    )
    # The harness's own words do not name a killed container.
    assert not reason_names_fault("container_kill", "the harness closed its output while sclate waited for 'turn_end'")
    assert reason_names_fault("disk_full", "paused: the state directory's disk is full (/s: database or disk is full)")
    assert not reason_names_fault("disk_full", "Deadline Exceeded")
    assert not reason_names_fault("no such fault", "anything at all")


@pytest.mark.parametrize(
    ("fault", "state_name", "reason", "outcome"),
    [
        ("daemon_kill", "SUCCEEDED", "all days done", "recovered"),
        ("harness_kill", "FAILED", "the harness process (agent.py serve) exited, exit code 137", "failed_clearly"),
        ("harness_kill", "FAILED", "internal error: KeyError: 'x'", "unclear"),
        ("disk_full", "REFUSED", "the state directory's disk is full (/s: 0 bytes free)", "failed_clearly"),
        ("disk_full", "DEADLINE_EXCEEDED", "Deadline Exceeded", "unclear"),
        ("disk_full", "ACCEPTED", "created while the disk was full", "unclear"),
        ("sigterm_restore", "RUNNING", "resumed from the last durable point", "unclear"),  # never ended
        ("sigterm_restore", "INTERRUPTED", "the daemon shut down before the run finished", "failed_clearly"),
    ],
)
def test_a_run_is_recovered_failed_clearly_or_unclear(fault: str, state_name: str, reason: str, outcome: str) -> None:
    assert classify(fault, state_name, reason) == outcome


def test_acknowledged_records_missing_or_changed_are_lost() -> None:
    ack = Acknowledged()
    ack.add_events([StreamEvent(1, "state", b"a"), StreamEvent(2, "fire", b"b"), StreamEvent(3, "verdict", b"c")])
    ack.add_calls({"c1": '{"x": 1}', "c2": '{"x": 2}'})
    assert (
        records_lost(ack, {1: b"a", 2: b"b", 3: b"c", 4: b"new"}, {"c1": '{"x": 1}', "c2": '{"x": 2}', "c3": ""}) == []
    )
    lost = records_lost(ack, {1: b"a", 3: b"C"}, {"c2": '{"x": 2}'})
    assert lost == ["event 2 is gone", "event 3 changed", "call c1 is gone"]


def test_leases_held_when_a_run_ends_are_leaked_but_not_those_of_a_killed_process() -> None:
    events = [
        state(1, "RUNNING"),
        lease(2, "turn:a", "acquired"),
        lease(3, "model-call:c1", "acquired"),
        # The daemon was SIGKILLed here: its lease table went with it.
        state(4, "RUNNING", "resumed from the last durable point"),
        lease(5, "turn:a", "acquired"),
        lease(6, "turn:a", "released"),
        lease(7, "model-call:c2", "acquired"),
        lease(8, "grade:d0", "acquired"),
        lease(9, "grade:d0", "expired"),
    ]
    assert held_leases(events) == {"model-call:c2": 1}
    assert leases_held_at_end(events) == []  # not ended yet: nothing to judge
    ended = [*events, state(10, "SUCCEEDED")]
    assert leases_held_at_end(ended) == ["model-call:c2"]
    # A shutdown that interrupts a run holding a lease leaked it too, even if a resume ends clean.
    resumed = [
        *ended[:-1],
        state(10, "INTERRUPTED"),
        state(11, "PENDING"),
        state(12, "RUNNING"),
        state(13, "SUCCEEDED"),
    ]
    assert leases_held_at_end(resumed) == ["model-call:c2"]
    assert leases_expired(ended) == ["grade:d0"]


def test_a_turn_left_suspended_by_a_killed_waiter_is_an_anomaly() -> None:
    before = [state(1, "RUNNING"), lease(2, "turn:d0.task0", "acquired")]
    # The wait suspended the turn (its lease released), its caller was killed...
    suspended = [*before, lease(3, "turn:d0.task0", "released")]
    # ... and the turn took its lease again at once, so its end releases it: fine.
    fixed = [*suspended, lease(4, "turn:d0.task0:after-wait", "acquired"), turn_ended(5)]
    assert turn_left_unleased([*fixed, lease(6, "turn:d0.task0:after-wait", "released")], 2) is None
    # Or it stayed suspended: its end releases nothing, the next turn's lease comes first.
    broken = [*suspended, turn_ended(4), lease(5, "turn:d0.task1", "acquired")]
    assert "ended without its lease" in (turn_left_unleased(broken, 2) or "")
    assert "ended without its lease" in (
        turn_left_unleased([*suspended, turn_ended(4), state(5, "SUCCEEDED")], 2) or ""
    )
    assert turn_left_unleased(suspended, 2) is None  # the turn has not ended: nothing to say yet


def _case(**kw: object) -> CaseOutcome:
    base: dict[str, object] = {
        "fault": "daemon_kill",
        "run": "runs/r",
        "injected": 1,
        "state": "SUCCEEDED",
        "reason": "",
    }
    return CaseOutcome(**{**base, **kw})  # type: ignore[arg-type]


def test_the_figures_come_out_bad_when_anything_is_lost_leaked_unclear_or_divergent() -> None:
    good = figures([_case()], seed=7, faults_injected=1, leftovers={})
    assert good["meets_targets"] and good["runs_recovered"] == 1 and good["missed_targets"] == []
    assert good["seed"] == 7

    bad = figures(
        [
            _case(records_lost=["event 3 is gone"]),
            _case(fault="container_kill", state="FAILED", reason="the harness closed its output"),
            _case(leases_leaked=["model-call:c1"]),
            _case(replay_divergence="journal entry 4: recorded fire of 'a', replay gave 'b'"),
            _case(fault="control_close", anomalies=["the turn ended without its lease"]),
        ],
        seed=7,
        faults_injected=5,
        leftovers={
            "containers": ["0123 exited"],
            "images": ["sclate-snap:r-1"],
            "sockets": ["/tmp/x/sclate.sock"],
            "processes": ["pid 9: python -m sclated.model"],
        },
    )
    assert bad["records_lost"] == 1 and bad["runs_unclear"] == 2 and bad["leases_leaked"] == 1
    assert bad["replay_divergences"] == 1
    assert (bad["containers_leaked"], bad["images_leaked"], bad["sockets_leaked"], bad["processes_leaked"]) == (
        1,
        1,
        1,
        1,
    )
    assert set(bad["missed_targets"]) == set(TARGETS)  # every figure can come out bad
    assert not bad["meets_targets"]
    assert not figures([], seed=1, faults_injected=0, leftovers={})["meets_targets"]  # nothing run, nothing met


def test_only_takes_the_parts_and_the_sandbox_faults_by_name() -> None:
    from sclated.bench._cli import FAULTS_PARTS, run_bench_cli

    # `--only` takes either; a name in both would select two things at once.
    assert (*PHASES, *SANDBOX_FAULTS) == FAULTS_PARTS
    assert len(set(FAULTS_PARTS)) == len(FAULTS_PARTS)
    with pytest.raises(SystemExit) as info:  # a wrong name is a usage error, before anything runs
        run_bench_cli("faults", ["--only", "nope"])
    assert info.value.code == 2


def test_a_run_that_succeeded_for_another_reason_than_its_scenario_s_is_an_anomaly() -> None:
    done = [state(1, "RUNNING"), state(2, "SUCCEEDED", "all days done")]
    assert ended_for(done, "all days done") is None
    idle = [state(1, "RUNNING"), state(2, "SUCCEEDED", "idle: nothing scheduled and nothing busy")]
    assert "not its scenario's 'all days done'" in (ended_for(idle, "all days done") or "")
    failed = [state(1, "RUNNING"), state(2, "FAILED", "the sandbox's container exited")]
    assert ended_for(failed, "all days done") is None  # a failure is judged by its reason instead
