"""Who made a call: run from the key, role map, API kind, harness hints, thread."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters import ProxyEndpoints
from proxy_addons._attribution import (
    ROLE_MODEL_PREFIX,
    Hints,
    api_key,
    api_kind,
    component_of,
    derive_thread,
    hints,
    listener_role,
    model_role,
    parse_roles,
    run_from_key,
    sampling_of,
)
from proxy_addons._call import Call
from tests.proxy_addons.harness import CHAT_BODY, KEY, RUN, SECRET


def test_parse_roles() -> None:
    assert parse_roles("4001=agent, 4002=memory") == {4001: "agent", 4002: "memory"}
    assert parse_roles("") == {}
    for bad in ("4001agent", "x=agent", "4001="):
        with pytest.raises(ValueError, match="sclate_roles"):
            parse_roles(bad)


def test_run_from_key() -> None:
    assert run_from_key(KEY, SECRET) == RUN
    assert run_from_key(f"sk-sclate-a-b-c-{SECRET}", SECRET) == "a-b-c"
    assert run_from_key(f"sk-sclate-{RUN}-wrong", SECRET) is None
    assert run_from_key(f"sk-sclate--{SECRET}", SECRET) is None
    assert run_from_key(KEY, "") is None  # no configured secret: fail closed
    assert run_from_key("sk-real-openai-key", SECRET) is None


def test_api_key_from_bearer_or_x_api_key() -> None:
    def headers(**h: str) -> Any:
        return lambda name: h.get(name.replace("-", "_"))

    assert api_key(headers(authorization=f"Bearer {KEY} ")) == ("authorization", KEY)
    assert api_key(headers(x_api_key=f" {KEY}")) == ("x-api-key", KEY)
    assert api_key(headers(authorization="Basic abc")) is None
    assert api_key(headers()) is None


def test_hints_from_headers() -> None:
    def of(h: dict[str, str]) -> Hints:
        return hints(lambda name: h.get(name))

    assert of({"x-sclate-thread": "th", "x-sclate-turn": "-3", "x-sclate-branch": "b"}) == Hints(
        thread="th", turn=-3, parent_thread=None, branch_hint="b"
    )
    assert of({"x-sclate-turn": "three"}).turn is None
    assert of({}) == Hints()


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("POST", "/v1/chat/completions", "openai_chat"),
        ("POST", "/v1/chat/completions/?x=1", "openai_chat"),
        ("POST", "/v1/completions", "openai_completions"),
        ("POST", "/v1/responses", "openai_responses"),
        ("POST", "/v1/messages", "anthropic_messages"),
        ("GET", "/v1/models", "other"),
        ("GET", "/v1/chat/completions", "other"),
        ("POST", "/v1/embeddings", "openai_embeddings"),
        ("POST", "/v1/models/x", "other"),
    ],
)
def test_api_kind(method: str, path: str, kind: str) -> None:
    assert api_kind(method, path) == kind


@pytest.mark.parametrize(
    ("listener", "api", "system", "component"),
    [
        ("memory:system", "openai_chat", "mem0", "memory:mem0"),
        ("memory", "openai_chat", "mem0", "memory:native"),  # the harness's own memory work
        ("memory:system", "openai_chat", "", "memory:system"),
        ("memory", "openai_chat", "", "memory:native"),
        ("memory:system", "openai_embeddings", "hindsight", "memory:embeddings"),
        ("memory", "openai_embeddings", "", "memory:embeddings"),
        ("agent", "openai_embeddings", "mem0", "agent:embeddings"),
        ("agent", "openai_chat", "mem0", "agent"),
        ("aux", "anthropic_messages", "hindsight", "aux"),
    ],
)
def test_component_of(listener: str, api: str, system: str, component: str) -> None:
    role, via_system = listener_role(listener)
    assert role in ("agent", "memory", "aux")
    assert component_of(role, api, system, via_system) == component


def test_sampling_of() -> None:
    assert sampling_of(CHAT_BODY) == {"temperature": 0.7, "max_tokens": 16, "seed": 3}
    assert sampling_of(["not", "a", "dict"]) == {}


def test_thread_derivation_groups_growing_conversations() -> None:
    first = derive_thread("openai_chat", CHAT_BODY)
    longer = dict(CHAT_BODY)
    longer["messages"] = [
        *CHAT_BODY["messages"],
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "y"},
    ]
    assert derive_thread("openai_chat", longer) == first
    other = dict(CHAT_BODY, messages=[{"role": "user", "content": "different"}])
    assert derive_thread("openai_chat", other) != first


@pytest.mark.parametrize(
    ("api", "opening", "later"),
    [
        (
            "anthropic_messages",
            {"system": "s", "messages": [{"role": "user", "content": "q"}]},
            {"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}]},
        ),
        ("openai_responses", {"instructions": "i", "input": [{"role": "user", "content": "q"}]}, {"input": [{"x": 1}]}),
        ("openai_completions", {"prompt": "p" * 3000}, {"prompt": "p" * 3000 + "more"}),
    ],
)
def test_thread_derivation_per_api(api: str, opening: dict[str, Any], later: dict[str, Any]) -> None:
    first = derive_thread(api, opening)
    grown = dict(opening)
    for k, v in later.items():
        grown[k] = (opening[k] + v) if k in opening and k != "prompt" else v
    assert derive_thread(api, grown) == first
    assert derive_thread(api, opening) != derive_thread("openai_chat", opening)
    assert derive_thread(api, None).startswith("t-")


def test_a_role_model_names_a_known_role_only() -> None:
    roles = {"agent", "aux"}
    assert model_role({"model": "sclate-role-aux"}, roles) == "aux"
    assert model_role({"model": "sclate-role-memory"}, roles) is None  # not a listener's role here
    assert model_role({"model": "claude-haiku"}, roles) is None
    assert model_role(["sclate-role-aux"], roles) is None
    # The harness contract hands out the same names.
    assert ProxyEndpoints.role_model("aux") == f"{ROLE_MODEL_PREFIX}aux"


def test_a_call_asking_for_a_role_model_is_that_roles_and_asks_for_the_runs_model() -> None:
    call = Call("c1", "run", "agent", "anthropic_messages", "POST", "/v1/messages", 0)
    raw = b'{"model": "sclate-role-aux", "max_tokens": 5, "messages": []}'
    forward = call.read_request(raw, True, {"agent", "aux"}, "smol")
    sent = json.loads(forward)
    assert call.role == "aux" and sent["model"] == "smol" and sent["return_token_ids"] is True
    assert call.injected == ["model", "return_token_ids", "logprobs"] and call.request_body == sent
    # Without a run model to ask for, nothing is rewritten and the listener's role stays.
    plain = Call("c2", "run", "agent", "anthropic_messages", "POST", "/v1/messages", 0)
    assert json.loads(plain.read_request(raw, False, {"agent", "aux"}, ""))["model"] == "sclate-role-aux"
    assert plain.role == "agent" and plain.injected == []
