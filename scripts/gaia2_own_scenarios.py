"""Writes sclate's own Gaia2 scenarios (adapters/gaia2/scenarios/*.json) in ARE's
export format (``are_simulation_v1``). Run with ARE's interpreter:

    PYTHONHASHSEED=0 .venv-are/bin/python scripts/gaia2_own_scenarios.py

The apps' initial states come from ARE's own apps (``get_state``), so they are
in the exact shape ARE's importer loads. Every scenario obeys ARE's DAG rules:
the first event is the user's task, each ENV event hangs on exactly one
USER/ENV event, the agent's expected actions are oracle (AGENT) events, and a
turn ends with the oracle's ``send_message_to_user``, after which the next
turn's task follows (in agent mode ARE turns that edge into a condition on the
agent's reply: Gaia2's conditional event).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from are.simulation.apps.agent_user_interface import AgentUserInterface
from are.simulation.apps.calendar import CalendarApp
from are.simulation.apps.contacts import Contact, ContactsApp
from are.simulation.apps.email_client import EmailClientV2
from are.simulation.apps.messaging_v2 import MessagingAppV2
from are.simulation.apps.system import SystemApp
from are.simulation.utils import EnumEncoder

OUT = Path(__file__).resolve().parents[1] / "adapters" / "gaia2" / "scenarios"
START = 1_767_686_400  # 2026-01-06 08:00 UTC
USER_EMAIL = "user@meta.com"


def _contacts() -> dict[str, Any]:
    app = ContactsApp()
    app.add_contact(Contact(first_name="Sam", last_name="Rivera", contact_id="c-user", is_user=True, email=USER_EMAIL))
    app.add_contact(Contact(first_name="Bob", last_name="Lee", contact_id="c-bob", email="bob@example.com"))
    app.add_contact(Contact(first_name="Carol", last_name="Diaz", contact_id="c-carol", email="carol@example.com"))
    return {"name": "ContactsApp", "class_name": "ContactsApp", "app_state": app.get_state()}


def _app(cls: type, name: str | None = None) -> dict[str, Any]:
    app = cls()
    return {"name": name or app.name, "class_name": cls.__name__, "app_state": app.get_state() or {}}


def _arg(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, list | dict):
        return {"name": name, "value": json.dumps(value), "value_type": type(value).__name__}
    return {"name": name, "value": str(value), "value_type": type(value).__name__}


def _event(
    eid: str,
    kind: str,
    app: str,
    function: str,
    args: dict[str, Any],
    *,
    deps: tuple[str, ...] = (),
    rel: float | None = None,
    at: float | None = None,
    write: bool = True,
) -> dict[str, Any]:
    return {
        "class_name": "OracleEvent" if kind == "AGENT" else "Event",
        "event_type": kind,
        "event_id": eid,
        "event_time": at,
        "event_relative_time": rel,
        "dependencies": list(deps),
        "action": {
            "action_id": f"{app}.{function}-{uuid.uuid5(uuid.NAMESPACE_URL, eid)}",
            "app": app,
            "function": function,
            "operation_type": "write" if write else "read",
            "args": [_arg(k, v) for k, v in args.items()],
        },
    }


def _trace(scenario_id: str, apps: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": "are_simulation_v1",
        "metadata": {
            "definition": {
                "scenario_id": scenario_id,
                "seed": 0,
                "duration": 7200,
                "time_increment_in_seconds": 1,
                "start_time": START,
                "tags": ["Time"],
            }
        },
        "apps": apps,
        "events": events,
    }


AUI = "AgentUserInterface"


def email_followup() -> dict[str, Any]:
    """A task, a reply two minutes after it, a late unrelated email at a fixed time."""
    events = [
        _event(
            "task",
            "USER",
            AUI,
            "send_message_to_agent",
            {"content": "Email bob@example.com to ask for the Q3 budget, and tell me what he answers."},
            rel=5,
        ),
        _event(
            "ask_bob",
            "AGENT",
            "EmailClientV2",
            "send_email",
            {"recipients": ["bob@example.com"], "subject": "Q3 budget", "content": "Hi Bob, what is the Q3 budget?"},
            deps=("task",),
            rel=3,
        ),
        _event(
            "bob_replies",
            "ENV",
            "EmailClientV2",
            "create_and_add_email",
            {
                "sender": "bob@example.com",
                "recipients": [USER_EMAIL],
                "subject": "Re: Q3 budget",
                "content": "Hi, the Q3 budget is 42k.",
                "folder_name": "INBOX",
            },
            deps=("task",),
            rel=120,
        ),
        _event(
            "tell_user",
            "AGENT",
            AUI,
            "send_message_to_user",
            {"content": "Bob says the Q3 budget is 42k."},
            deps=("bob_replies",),
            rel=10,
        ),
        _event(
            "late_newsletter",
            "ENV",
            "EmailClientV2",
            "create_and_add_email",
            {
                "sender": "news@example.com",
                "recipients": [USER_EMAIL],
                "subject": "Weekly news",
                "content": "Nothing to act on.",
                "folder_name": "INBOX",
            },
            deps=("task",),
            at=START + 60,
        ),
    ]
    apps = [_app(AgentUserInterface), _app(EmailClientV2), _contacts(), _app(SystemApp)]
    return _trace("sclate_email_followup", apps, events)


def calendar_chain() -> dict[str, Any]:
    """A chain of environment events: an invitation, a message about it, a change."""
    events = [
        _event(
            "task",
            "USER",
            AUI,
            "send_message_to_agent",
            {"content": "Carol will invite me to a review. Put it in my calendar and tell me when it is."},
            rel=2,
        ),
        _event(
            "carol_invites",
            "ENV",
            "CalendarApp",
            "add_calendar_event_by_attendee",
            {
                "who_add": "Carol Diaz",
                "title": "Design review",
                "start_datetime": "2026-01-07 10:00:00",
                "end_datetime": "2026-01-07 11:00:00",
                "attendees": ["Carol Diaz", "Sam Rivera"],
            },
            deps=("task",),
            rel=60,
        ),
        _event(
            "carol_writes",
            "ENV",
            "MessagingAppV2",
            "create_and_add_message",
            {"conversation_id": "conv-carol", "sender_id": "carol", "content": "I sent you the review invite."},
            deps=("carol_invites",),
            rel=30,
        ),
        _event(
            "carol_moves_it",
            "ENV",
            "MessagingAppV2",
            "create_and_add_message",
            {"conversation_id": "conv-carol", "sender_id": "carol", "content": "Sorry: same day, 14:00 instead."},
            deps=("carol_writes",),
            rel=300,
        ),
        _event(
            "add_event",
            "AGENT",
            "CalendarApp",
            "add_calendar_event",
            {
                "title": "Design review",
                "start_datetime": "2026-01-07 14:00:00",
                "end_datetime": "2026-01-07 15:00:00",
                "attendees": ["Carol Diaz"],
            },
            deps=("carol_moves_it",),
            rel=5,
        ),
        _event(
            "tell_user",
            "AGENT",
            AUI,
            "send_message_to_user",
            {"content": "The design review is on 2026-01-07 at 14:00."},
            deps=("add_event",),
            rel=2,
        ),
    ]
    conv = _conversation(MessagingAppV2())
    apps = [
        _app(AgentUserInterface),
        _app(CalendarApp),
        {"name": "MessagingAppV2", "class_name": "MessagingAppV2", "app_state": conv},
        _contacts(),
        _app(SystemApp),
    ]
    return _trace("sclate_calendar_chain", apps, events)


def _conversation(messaging: MessagingAppV2) -> dict[str, Any]:
    """Sam's conversation with Carol, as MessagingAppV2 keeps it."""
    state = messaging.get_state()
    state["current_user_id"], state["current_user_name"] = "sam", "Sam Rivera"
    state["name_to_id"] = {"Sam Rivera": "sam", "Carol Diaz": "carol"}
    state["id_to_name"] = {"sam": "Sam Rivera", "carol": "Carol Diaz"}
    state["conversations"] = {
        "conv-carol": {
            "participant_ids": ["sam", "carol"],
            "messages": [],
            "title": "Carol Diaz",
            "conversation_id": "conv-carol",
            "last_updated": START,
        }
    }
    return state


def two_turns() -> dict[str, Any]:
    """Two turns: the second task only follows the agent's first answer."""
    events = [
        _event(
            "task1",
            "USER",
            AUI,
            "send_message_to_agent",
            {"content": "Send Bob a message asking whether he is coming to dinner on Friday."},
            rel=1,
        ),
        _event(
            "ask_bob",
            "AGENT",
            "MessagingAppV2",
            "send_message",
            {"user_id": "bob", "content": "Are you coming to dinner on Friday?"},
            deps=("task1",),
            rel=2,
        ),
        _event(
            "answer1",
            "AGENT",
            AUI,
            "send_message_to_user",
            {"content": "I asked Bob about Friday's dinner."},
            deps=("ask_bob",),
            rel=1,
        ),
        _event(
            "bob_answers",
            "ENV",
            "MessagingAppV2",
            "create_and_add_message",
            {"conversation_id": "conv-bob", "sender_id": "bob", "content": "Yes, I will be there at 8."},
            deps=("answer1",),
            rel=600,
        ),
        _event(
            "task2",
            "USER",
            AUI,
            "send_message_to_agent",
            {"content": "Did Bob answer? Email carol@example.com the time he gave."},
            deps=("bob_answers",),
            rel=60,
        ),
        _event(
            "email_carol",
            "AGENT",
            "EmailClientV2",
            "send_email",
            {"recipients": ["carol@example.com"], "subject": "Friday dinner", "content": "Bob comes at 8."},
            deps=("task2",),
            rel=4,
        ),
        _event(
            "answer2",
            "AGENT",
            AUI,
            "send_message_to_user",
            {"content": "Bob comes at 8; I told Carol."},
            deps=("email_carol",),
            rel=2,
        ),
    ]
    messaging = MessagingAppV2()
    state = messaging.get_state()
    state["current_user_id"], state["current_user_name"] = "sam", "Sam Rivera"
    state["name_to_id"] = {"Sam Rivera": "sam", "Bob Lee": "bob"}
    state["id_to_name"] = {"sam": "Sam Rivera", "bob": "Bob Lee"}
    state["conversations"] = {
        "conv-bob": {
            "participant_ids": ["sam", "bob"],
            "messages": [],
            "title": "Bob Lee",
            "conversation_id": "conv-bob",
            "last_updated": START,
        }
    }
    apps = [
        _app(AgentUserInterface),
        {"name": "MessagingAppV2", "class_name": "MessagingAppV2", "app_state": state},
        _app(EmailClientV2),
        _contacts(),
        _app(SystemApp),
    ]
    return _trace("sclate_two_turns", apps, events)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for build in (email_followup, calendar_chain, two_turns):
        trace = build()
        path = OUT / f"{trace['metadata']['definition']['scenario_id']}.json"
        # Enums by value, as ARE's own exporter writes them (its EnumEncoder).
        path.write_text(json.dumps(trace, indent=1, sort_keys=True, cls=EnumEncoder) + "\n")
        print(path)


if __name__ == "__main__":
    main()
