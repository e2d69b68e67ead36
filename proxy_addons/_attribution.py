"""Who made a call, and in which conversation: the run from the API key, the
role from the listener, the API from the path, the thread from the body or
the harness's own headers, and the sampling settings asked for."""

import dataclasses
import hashlib
import hmac
import json
from collections.abc import Callable, Collection
from typing import Any

from proxy_addons import _branch_hints
from proxy_addons.record import ApiKind

KEY_PREFIX = "sk-sclate-"
UNKNOWN_ROLE = "unknown"
ROLE_MODEL_PREFIX = "sclate-role-"
"""A call asking for model ``sclate-role-<role>`` is ``role``'s, whatever listener it came
in on (a harness with one endpoint and several model tiers: Claude Code's background
model); it is forwarded asking for the run's model."""
SCLATE_HEADERS = ("x-sclate-thread", "x-sclate-turn", "x-sclate-parent-thread", "x-sclate-branch")
"""Optional hints a harness may send; taken off before the call goes upstream."""

SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "stop",
    "stop_sequences",
    "seed",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "reasoning_effort",
    "reasoning",
    "thinking",
    "tool_choice",
    "response_format",
)

Header = Callable[[str], str | None]
"""A request header by its lower-case name, or None when absent."""


def parse_roles(spec: str) -> dict[int, str]:
    """``"4001=agent,4002=memory"`` -> ``{4001: "agent", 4002: "memory"}``."""
    roles: dict[int, str] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        port_s, sep, role = part.partition("=")
        if not sep or not role.strip() or not port_s.strip().isdigit():
            raise ValueError(f"sclate_roles: bad entry {part!r} (want PORT=ROLE)")
        roles[int(port_s)] = role.strip()
    return roles


def api_key(header: Header) -> tuple[str, str] | None:
    """``(header name, key)`` of the call's API key (a bearer token or
    Anthropic's ``x-api-key``), or None when it has none."""
    auth = header("authorization") or ""
    if auth.lower().startswith("bearer "):
        return "authorization", auth[7:].strip()
    key = header("x-api-key")
    if key:
        return "x-api-key", key.strip()
    return None


def run_from_key(key: str, secret: str) -> str | None:
    """The run named by ``sk-sclate-<run>-<secret>``, or None if the key is not ours.

    The secret is compared in constant time; an empty expected secret matches
    nothing, so a misconfigured sandbox fails closed instead of forwarding.
    """
    if not secret or not key.startswith(KEY_PREFIX):
        return None
    body = key[len(KEY_PREFIX) :]
    suffix = "-" + secret
    if len(body) <= len(suffix):
        return None
    run, given = body[: -len(suffix)], body[-len(suffix) :]
    if not hmac.compare_digest(given.encode(), suffix.encode()) or not run:
        return None
    return run


@dataclasses.dataclass(frozen=True)
class Hints:
    """What the harness says of a call in ``x-sclate-*`` headers (all optional)."""

    thread: str | None = None
    turn: int | None = None
    parent_thread: str | None = None
    branch_hint: str | None = None


def hints(header: Header) -> Hints:
    """The ``x-sclate-*`` headers; where they are silent, the harness's own marks
    (Codex's sub-agent headers, see :mod:`proxy_addons._branch_hints`)."""
    turn = header("x-sclate-turn")
    own_branch, own_parent = _branch_hints.from_headers(header)
    return Hints(
        thread=header("x-sclate-thread") or None,
        # At most 18 digits: a longer one is past Python's int parsing limits (and any turn).
        turn=int(turn) if turn and turn.strip().lstrip("-").isdigit() and len(turn.strip()) <= 18 else None,
        parent_thread=header("x-sclate-parent-thread") or own_parent,
        branch_hint=header("x-sclate-branch") or own_branch,
    )


def model_role(body: Any, roles: Collection[str]) -> str | None:
    """The role a request names through its model (``sclate-role-aux``), if it is a known one."""
    model = body.get("model") if isinstance(body, dict) else None
    if isinstance(model, str) and model.startswith(ROLE_MODEL_PREFIX):
        role = model[len(ROLE_MODEL_PREFIX) :]
        if role in roles:
            return role
    return None


def api_kind(method: str, path: str) -> ApiKind:
    p = path.split("?", 1)[0].rstrip("/")
    if method.upper() != "POST":
        return "other"
    if p.endswith("/chat/completions"):
        return "openai_chat"
    if p.endswith("/embeddings"):
        return "openai_embeddings"
    if p.endswith("/completions"):
        return "openai_completions"
    if p.endswith("/responses"):
        return "openai_responses"
    if p.endswith("/messages"):
        return "anthropic_messages"
    return "other"


MEMORY_ROLE = "memory"
SYSTEM_LISTENER = "system"
"""``PORT=memory:system`` in ``sclate_roles``: the memory role's second listener, the
one a memory system (Mem0, Hindsight) is pointed at; the first one takes the
harness's own memory work (its consolidation cron)."""


def listener_role(spec: str) -> tuple[str, bool]:
    """A listener's role as ``sclate_roles`` names it, and whether it is the memory
    system's (``memory:system`` -> ``("memory", True)``)."""
    role, _, sub = spec.partition(":")
    return role, sub == SYSTEM_LISTENER


def component_of(role: str, api: str, memory_system: str, via_system: bool = False) -> str:
    """What made a call, finer than its role (``Record.component``).

    Embedding calls are counted apart from chat calls (``memory:embeddings``): they
    cost little and carry no token ids, and a reader comparing memory systems wants
    the two separately. A call on the memory system's listener is the run's memory
    system's (``memory:mem0``); any other memory call is the harness's own memory
    work (``memory:native``)."""
    if api == "openai_embeddings":
        return f"{role}:embeddings"
    if role == MEMORY_ROLE:
        return f"{MEMORY_ROLE}:{(memory_system or SYSTEM_LISTENER) if via_system else 'native'}"
    return role


def sampling_of(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        return {}
    return {k: body[k] for k in SAMPLING_KEYS if k in body}


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def derive_thread(api: str, body: Any) -> str:
    """A stable thread id from the opening of a conversation.

    Calls of one conversation share their first messages (system prompt and
    first user message) while later ones only grow, so hashing that opening
    groups them without any help from the harness.
    """
    key: Any
    if not isinstance(body, dict):
        key = ["raw", api]
    elif api == "openai_chat":
        msgs = body.get("messages")
        head: list[Any] = []
        if isinstance(msgs, list):
            for m in msgs:
                head.append(m)
                if isinstance(m, dict) and m.get("role") == "user":
                    break
        key = [api, head]
    elif api == "anthropic_messages":
        msgs = body.get("messages")
        key = [api, body.get("system"), msgs[:1] if isinstance(msgs, list) else None]
    elif api == "openai_responses":
        inp = body.get("input")
        key = [api, body.get("instructions"), inp[:1] if isinstance(inp, list) else inp]
    elif api == "openai_completions":
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            key = [api, prompt[:2000]]
        elif isinstance(prompt, list):
            key = [api, prompt[:256]]
        else:
            key = [api, None]
    else:
        key = [api, sorted(body.keys())]
    return "t-" + _hash(key)[:16]
