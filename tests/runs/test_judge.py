"""The judge: any OpenAI-compatible endpoint, its key from a named variable, max_tokens as
upstream, and every reply saying who judged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from sclated.errors import InvalidArgument, ModelUnavailable
from sclated.runs._judge import JUDGE_MAX_TOKENS, JudgeConfig, ask_judge


@pytest.fixture
async def stand_in_judge() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """Test double of a judge endpoint: records requests, answers 'yes'."""
    seen: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append({"body": await request.json(), "auth": request.headers.get("authorization")})
        return web.json_response({"model": "judge-4o", "choices": [{"message": {"content": "yes"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def _no_embedded() -> str:
    raise AssertionError("the embedded model must not be asked when a judge endpoint is set")


async def test_an_external_judge_with_a_key_from_a_named_variable(
    stand_in_judge: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = stand_in_judge
    monkeypatch.setenv("SCLATE_TEST_JUDGE_KEY", "sk-judge-123")
    config = JudgeConfig.from_options(
        {"judge_base_url": url, "judge_model": "gpt-4o", "judge_api_key_env": "SCLATE_TEST_JUDGE_KEY"}
    )
    reply = await ask_judge(config, "Is it correct?", embedded_url=_no_embedded)
    assert reply.text == "yes" and reply.endpoint == url and reply.model == "judge-4o" and not reply.embedded
    assert seen[0]["auth"] == "Bearer sk-judge-123"
    assert seen[0]["body"]["max_tokens"] == JUDGE_MAX_TOKENS == 10
    assert seen[0]["body"]["temperature"] == 0 and seen[0]["body"]["model"] == "gpt-4o"
    assert reply.details() == {"judge_endpoint": url, "judge_model": "judge-4o", "judge_embedded": False}


async def test_without_an_endpoint_the_embedded_model_judges_and_it_is_marked(
    stand_in_judge: tuple[str, list[dict[str, Any]]],
) -> None:
    url, _ = stand_in_judge

    async def embedded() -> str:
        return url

    reply = await ask_judge(JudgeConfig(), "Is it correct?", embedded_url=embedded)
    assert reply.embedded and reply.endpoint == "embedded"


async def test_an_unreachable_judge_names_its_endpoint() -> None:
    config = JudgeConfig(base_url="http://127.0.0.1:9")
    with pytest.raises(ModelUnavailable, match=r"judge endpoint http://127\.0\.0\.1:9"):
        await ask_judge(config, "?", embedded_url=_no_embedded)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"judge_base_url": "ftp://x"}, "judge_base_url"),
        ({"judge_api_key_env": "NOT A NAME"}, "judge_api_key_env"),
        ({"judge_api_key_env": "SCLATE_SURELY_UNSET_VARIABLE"}, "judge_api_key_env"),
        ({"judge_model": 3}, "judge_model"),
    ],
)
def test_bad_judge_options_name_the_option(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        JudgeConfig.from_options(options)
    assert err.value.field == f"run.benchmark.options.{field}"


def test_the_run_model_endpoint_is_the_default_judge() -> None:
    assert JudgeConfig.from_options({}, run_model_url="http://vllm:8000").base_url == "http://vllm:8000"
    assert JudgeConfig.from_options({}).base_url == ""
