"""The judge model a benchmark grades with (LongMemEval's answer check).

Any OpenAI-compatible endpoint, chosen per run with benchmark options:

- ``judge_base_url``: the endpoint (default: the run's model endpoint, else the
  daemon's embedded model);
- ``judge_model``: the model name to ask for;
- ``judge_api_key_env``: the NAME of an environment variable of the daemon
  that holds the endpoint's key (the key itself never enters a run spec).

Every reply says which endpoint and model gave it, so each verdict records
its judge; a verdict of the embedded model is marked, since its scores are not
comparable with published ones (those use GPT-4o).
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from adapters import JudgeReply
from sclated.errors import InvalidArgument, ModelUnavailable

__all__ = ["JUDGE_MAX_TOKENS", "JudgeConfig", "ask_judge"]

JUDGE_MAX_TOKENS = 10
"""As upstream LongMemEval's evaluate_qa.py (``max_tokens=10``, temperature 0)."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True, slots=True)
class JudgeConfig:
    base_url: str = ""
    """Empty: the run's model endpoint, else the embedded model."""
    model: str = ""
    api_key_env: str = ""

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, run_model_url: str = "") -> JudgeConfig:
        """Validate the judge options of a run (InvalidArgument names the bad one)."""

        def text(key: str) -> str:
            value = options.get(key, "")
            if not isinstance(value, str):
                raise InvalidArgument(f"{key} must be a string", field=f"run.benchmark.options.{key}")
            return value.strip()

        base_url = text("judge_base_url") or run_model_url
        if base_url and not re.match(r"^https?://[^\s/]+", base_url):
            raise InvalidArgument(
                f"judge_base_url {base_url!r} is not an http(s) URL", field="run.benchmark.options.judge_base_url"
            )
        key_env = text("judge_api_key_env")
        if key_env and not _ENV_NAME.match(key_env):
            raise InvalidArgument(
                f"judge_api_key_env {key_env!r} is not an environment variable name",
                field="run.benchmark.options.judge_api_key_env",
            )
        if key_env and key_env not in os.environ:
            raise InvalidArgument(
                f"judge_api_key_env names {key_env}, which is not set in the daemon's environment "
                "(set it where sclated starts, e.g. an EnvironmentFile= of the systemd unit)",
                field="run.benchmark.options.judge_api_key_env",
            )
        return cls(base_url=base_url, model=text("judge_model"), api_key_env=key_env)


async def ask_judge(
    config: JudgeConfig,
    prompt: str,
    *,
    embedded_url: Callable[[], Awaitable[str]],
    max_tokens: int = JUDGE_MAX_TOKENS,
) -> JudgeReply:
    """One chat call at temperature 0; ModelUnavailable names the endpoint when it fails."""
    embedded = not config.base_url
    base = config.base_url or await embedded_url()
    url = base.rstrip("/")
    if not url.endswith("/v1"):
        url += "/v1"
    body = {
        "model": config.model or "default",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    headers = {}
    if config.api_key_env:
        headers["authorization"] = f"Bearer {os.environ.get(config.api_key_env, '')}"
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{url}/chat/completions", json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=300)
            ) as resp,
        ):
            data = await resp.json(content_type=None)
            if resp.status != 200:
                raise ModelUnavailable(f"judge endpoint {base} answered HTTP {resp.status}: {str(data)[:300]}")
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ModelUnavailable(f"judge endpoint {base} failed: {type(exc).__name__}: {exc}") from exc
    try:
        text = str(data["choices"][0]["message"].get("content") or "")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ModelUnavailable(f"judge endpoint {base} sent no chat completion: {str(data)[:300]}") from None
    model = str(data.get("model") or config.model or "")
    return JudgeReply(text=text, endpoint=base if not embedded else "embedded", model=model, embedded=embedded)
