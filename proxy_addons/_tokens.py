"""Token ids and log probabilities: asking the server for them, and
taking them out of a response exactly as the server returned them (nothing
is ever re-tokenized: a response without ids yields None)."""

import dataclasses
import hashlib
import json
from typing import Any

from proxy_addons.record import Completion, is_token_ids

LOGPROB_FLAGS: dict[str, tuple[str, Any]] = {
    # Completions take an int (extra top alternatives); 0 still returns the
    # sampled token's own logprob. Chat and Anthropic messages take a bool;
    # the Responses API takes a count of alternatives.
    "openai_chat": ("logprobs", True),
    "openai_completions": ("logprobs", 0),
    "anthropic_messages": ("logprobs", True),
    "openai_responses": ("top_logprobs", 0),
}


@dataclasses.dataclass
class Tokens:
    prompt_token_ids: list[int] | None
    completions: list[Completion]
    usage: dict[str, Any] | None
    finish_reason: str | None
    warnings: list[str]


def _ids(v: Any) -> list[int] | None:
    return list(v) if is_token_ids(v) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _logprobs(lp: Any) -> list[float] | None:
    if not isinstance(lp, dict):
        return None
    content = lp.get("content")
    if isinstance(content, list):  # chat: one entry per token
        out = [
            float(e["logprob"])
            for e in content
            if isinstance(e, dict) and isinstance(e.get("logprob"), int | float) and not isinstance(e["logprob"], bool)
        ]
        return out if len(out) == len(content) else None
    values = lp.get("token_logprobs")
    if isinstance(values, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values]  # completions
    return None


def _responses_logprobs(resp: dict[str, Any]) -> list[float] | None:
    """A Responses completion's logprobs: the top-level list when the server gives one
    (every sampled token, tool calls included), else its one message's text part's."""
    top = resp.get("logprobs")
    if isinstance(top, list):
        return _logprobs({"content": top})
    parts = [
        part
        for item in resp.get("output") or []
        if isinstance(item, dict) and item.get("type") == "message"
        for part in item.get("content") or []
        if isinstance(part, dict) and part.get("type") == "output_text"
    ]
    if len(parts) != 1 or not isinstance(parts[0].get("logprobs"), list):
        return None
    return _logprobs({"content": parts[0]["logprobs"]})


def extract_tokens(api: str, resp: Any) -> Tokens:
    """Token ids, logprobs, usage and the finish reason of a (reassembled) response."""
    out = Tokens(None, [], None, None, [])
    if not isinstance(resp, dict):
        return out
    usage = resp.get("usage")
    out.usage = usage if isinstance(usage, dict) else None
    out.prompt_token_ids = _ids(resp.get("prompt_token_ids"))
    if api in ("anthropic_messages", "openai_responses"):
        # One completion, its ids on the message (Anthropic: the final
        # message_delta's; Responses: the final response's).
        out.finish_reason = _str(resp.get("stop_reason" if api == "anthropic_messages" else "status"))
        token_ids = _ids(resp.get("token_ids"))
        logprobs = _logprobs(resp.get("logprobs")) if api == "anthropic_messages" else _responses_logprobs(resp)
        if token_ids is not None and logprobs is not None and len(token_ids) != len(logprobs):
            out.warnings.append(f"{len(token_ids)} token ids but {len(logprobs)} logprobs; logprobs dropped")
            logprobs = None
        if token_ids is not None or logprobs is not None:
            out.completions.append(
                Completion(index=0, token_ids=token_ids, logprobs=logprobs, finish_reason=out.finish_reason)
            )
        return out
    for ch in resp.get("choices") or []:
        if not isinstance(ch, dict):
            continue
        idx = ch.get("index")
        idx = idx if type(idx) is int else len(out.completions)
        if out.prompt_token_ids is None:
            out.prompt_token_ids = _ids(ch.get("prompt_token_ids"))
        token_ids = _ids(ch.get("token_ids"))
        logprobs = _logprobs(ch.get("logprobs"))
        if token_ids is not None and logprobs is not None and len(token_ids) != len(logprobs):
            out.warnings.append(
                f"choice {idx}: {len(token_ids)} token ids but {len(logprobs)} logprobs; logprobs dropped"
            )
            logprobs = None
        out.completions.append(
            Completion(index=idx, token_ids=token_ids, logprobs=logprobs, finish_reason=_str(ch.get("finish_reason")))
        )
    out.completions.sort(key=lambda c: c["index"])
    if out.completions:
        out.finish_reason = out.completions[0]["finish_reason"]
    return out


def inject_token_flags(api: str, body: Any) -> list[str]:
    """Ask the server for token ids and logprobs (in ``body``); returns the keys added."""
    if not isinstance(body, dict) or api not in LOGPROB_FLAGS:
        return []
    added: list[str] = []
    if "return_token_ids" not in body:
        body["return_token_ids"] = True
        added.append("return_token_ids")
    key, value = LOGPROB_FLAGS[api]
    if key not in body:
        body[key] = value
        added.append(key)
    return added


OUTPUT_BOUND_KEYS: dict[str, tuple[str, ...]] = {
    # The key that bounds a call's output, and the spellings that already do.
    "openai_chat": ("max_tokens", "max_completion_tokens"),
    "openai_completions": ("max_tokens",),
    "anthropic_messages": ("max_tokens",),
    "openai_responses": ("max_output_tokens",),
}


def inject_output_bound(api: str, body: Any, limit: int) -> list[str]:
    """Bound a call's output at ``limit`` tokens when it sets no bound (in ``body``);
    returns the key added. For a harness that sends none and has no setting for one
    (Codex): a small model would otherwise sample until its context is full."""
    keys = OUTPUT_BOUND_KEYS.get(api)
    if limit <= 0 or not keys or not isinstance(body, dict) or any(body.get(k) is not None for k in keys):
        return []
    body[keys[0]] = limit
    return [keys[0]]


def add_fields(raw: bytes, fields: dict[str, Any]) -> bytes | None:
    """``raw``, a JSON object, with ``fields`` (absent from it) put first, the
    rest left as it was: re-serialising a long conversation costs milliseconds.
    None if ``raw`` does not start like an object."""
    text = raw.lstrip()
    if not text.startswith(b"{"):
        return None
    rest = text[1:]
    added = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in fields.items()).encode()
    return b"{" + added + (b"" if rest.lstrip().startswith(b"}") else b", ") + rest


def with_token_flags(
    api: str, raw: bytes, body: Any, output_bound: int = 0, *, token_flags: bool = True
) -> tuple[bytes, list[str]]:
    """The request body to forward, asking for token ids and logprobs where the
    API takes them and the caller did not set them (and bounding its output at
    ``output_bound`` tokens when it sets no bound), and the keys added.
    ``body`` is ``raw`` parsed (None when it is not JSON); it gets the keys too."""
    added = (inject_token_flags(api, body) if token_flags else []) + inject_output_bound(api, body, output_bound)
    if not added:
        return raw, added
    spliced = add_fields(raw, {k: body[k] for k in added})
    if spliced is None:
        spliced = json.dumps(body, ensure_ascii=False).encode()
    return spliced, added


def call_seed(sampling_seed: int, body_hash: str) -> int:
    """A call's seed: the run's sampling seed mixed with the request body, so a replayed
    call samples the same and two runs of a branch group (their own seeds) differently.
    31 bits: every server takes it."""
    digest = hashlib.sha256(f"{sampling_seed}:{body_hash}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def with_seed(raw: bytes, body: Any, seed: int) -> tuple[bytes, bool]:
    """``raw`` with ``seed`` put in when the request sets none (``body`` is ``raw``
    parsed; it gets the key too); whether it was added."""
    if not isinstance(body, dict) or "seed" in body:
        return raw, False
    body["seed"] = seed
    spliced = add_fields(raw, {"seed": seed})
    return (spliced if spliced is not None else json.dumps(body, ensure_ascii=False).encode()), True
