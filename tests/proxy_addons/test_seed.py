"""A run's sampling seed on its calls: put in where the call sets none, per API."""

from __future__ import annotations

import json

from proxy_addons._call import Call
from proxy_addons._tokens import call_seed
from proxy_addons.record import ApiKind

CHAT = ("openai_chat",)


def _call(api: ApiKind = "openai_chat") -> Call:
    return Call(call_id="c1", run="r", role="agent", api=api, method="POST", path="/v1/chat/completions", start_ns=0)


def _forward(
    body: dict[str, object], seed: int | None, apis: tuple[str, ...] = CHAT, api: ApiKind = "openai_chat"
) -> dict[str, object]:
    call = _call(api)
    out = json.loads(call.read_request(json.dumps(body).encode(), False, sampling_seed=seed, seed_apis=apis))
    assert ("seed" in call.injected) == (out.get("seed") != body.get("seed"))
    return dict(out)


def test_a_call_without_a_seed_gets_one_from_the_run_and_its_body() -> None:
    body: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    a = _forward(body, 11)
    assert a["seed"] == _forward(body, 11)["seed"]  # a replay samples the same
    assert a["seed"] != _forward(body, 12)["seed"]  # another run of the group does not
    other: dict[str, object] = {**body, "messages": [{"role": "user", "content": "hello"}]}
    assert a["seed"] != _forward(other, 11)["seed"]  # nor another call of the same run
    assert isinstance(a["seed"], int) and 0 <= a["seed"] < 2**31


def test_a_seed_is_never_overwritten_nor_added_where_not_asked() -> None:
    body: dict[str, object] = {"model": "m", "seed": 5, "messages": []}
    assert _forward(body, 11)["seed"] == 5
    assert "seed" not in _forward({"model": "m", "messages": []}, None)
    # An API the endpoint would refuse the field on (Anthropic's, for an external endpoint).
    assert "seed" not in _forward({"model": "m", "messages": []}, 11, apis=CHAT, api="anthropic_messages")


def test_call_seed_is_stable() -> None:
    assert call_seed(1, "abc") == call_seed(1, "abc") != call_seed(2, "abc")
