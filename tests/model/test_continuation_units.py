"""Token continuation without sampling: the delta rendering against the whole
rendering, with the model's own tokenizer (a vocab-only load), and the table.

The identity test plays a conversation turn by turn as if the model had sampled
exactly the template's tokens for each assistant message: then every prompt the
continuation builds must be token for token the whole rendering's, and built on
the kept exchange (not rendered whole), or the template is not prefix-stable
and the test fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sclated.model import ChatMessage, ChatRenderer, ToolCall, ToolSpec, default_gguf_path
from sclated.model.__main__ import parse_args
from sclated.model._continuation import ENV_FLAG, ChatPrompt, Conversations, continuation_from_env

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = [pytest.mark.model]

# A ChatML template with native tools, shaped as Qwen2.5's: tools in the system turn,
# calls as <tool_call> JSON, consecutive tool results grouped into one user turn.
NATIVE_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}You are helpful.{% endif %}\n\n"
    "<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role in ('user', 'system') %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}\n<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>'
    "{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}"
    "{% if loop.first or loop.previtem.role != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ m.content }}\n</tool_response>"
    "{% if loop.last or loop.nextitem.role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Not prefix-stable: the system turn counts the messages.
COUNTING_TEMPLATE = (
    "<|im_start|>system\n{{ messages | length }} messages<|im_end|>\n"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Not prefix-stable either: an earlier reply loses its reasoning (as Qwen3's template does).
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and not loop.last %}{{ m.content.split('</think>')[-1] | trim }}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CLOSING = "<|im_end|>"

TOOLS = [
    ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),
    ToolSpec("shell", "Run a command", {"type": "object", "properties": {"command": {"type": "string"}}}),
]

CONVERSATION = [
    ChatMessage("system", "You are a careful assistant.\nBe brief."),
    ChatMessage("user", "What is in notes.md?"),
    ChatMessage("assistant", "", (ToolCall("call_a", "read_file", '{"path": "notes.md"}'),)),
    ChatMessage("tool", "- buy milk\n- call Ann", tool_call_id="call_a"),
    ChatMessage("assistant", "It says: buy milk, call Ann."),
    ChatMessage("user", "  Count the lines, then list the folder.  "),
    ChatMessage(
        "assistant",
        "Sure.",
        (
            ToolCall("call_b", "shell", '{"command": "wc -l notes.md"}'),
            ToolCall("call_c", "shell", '{"command": "ls"}'),
        ),
    ),
    ChatMessage("tool", "2 notes.md", tool_call_id="call_b"),
    ChatMessage("tool", "notes.md\ntodo.md", tool_call_id="call_c"),
    ChatMessage("assistant", "Two lines; the folder has notes.md and todo.md.\n\n```\nok\n```"),
    ChatMessage("user", "Thanks! 😀 Und jetzt?"),
]


class Vocab:
    """The model's tokenizer and nothing else, as the continuation sees an engine."""

    n_ctx = 8192

    def __init__(self, llm: Any):
        self.llm = llm

    async def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        return [int(i) for i in self.llm.tokenize(text.encode(), add_bos=False, special=True)]

    def ids(self, text: str) -> list[int]:
        return [int(i) for i in self.llm.tokenize(text.encode(), add_bos=False, special=True)]


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return Vocab(llama_cpp.Llama(str(default_gguf_path()), vocab_only=True, verbose=False))


@pytest.fixture(scope="module")
def model_template(vocab: Vocab) -> str:
    template: str = vocab.llm.metadata["tokenizer.chat_template"]
    return template


def template_sample(
    vocab: Vocab, renderer: ChatRenderer, messages: Sequence[ChatMessage], k: int, tools: Sequence[ToolSpec]
) -> list[int]:
    """The ids of assistant message ``k`` and its closing token, as the whole rendering
    tokenizes them: what a model that sampled the template's own tokens would have sampled."""
    head = renderer.render(messages[:k], tools)
    whole = renderer.render(messages[: k + 1], tools)
    assert whole.startswith(head)
    end = whole.index(CLOSING, len(head)) + len(CLOSING)
    head_ids, through = vocab.ids(head), vocab.ids(whole[:end])
    assert through[: len(head_ids)] == head_ids  # a premise of the simulation, not of the code
    return through[len(head_ids) :]


async def play(
    vocab: Vocab, renderer: ChatRenderer, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
) -> tuple[Conversations, list[ChatPrompt]]:
    """Each prompt of the conversation in turn (before each assistant message, then the
    whole), each reply kept as sampled; checks every prompt against the whole rendering."""
    conversations = Conversations()
    prompts: list[ChatPrompt] = []
    sample: list[int] = []
    replies = [k for k, m in enumerate(messages) if m.role == "assistant"]
    for n, k in enumerate([*replies, len(messages)]):
        prompt = await conversations.prompt(vocab, renderer, messages[:k], tools)
        assert prompt.ids == vocab.ids(renderer.render(messages[:k], tools)), f"prompt before message {k}"
        if n > 0:
            # Built on the kept exchange, not rendered whole.
            assert prompt.continued > 0, f"prompt before message {k} was rendered whole"
            assert prompt.ids[: prompt.continued] == prompts[-1].ids + sample
        prompts.append(prompt)
        if k < len(messages):
            sample = template_sample(vocab, renderer, messages, k, tools)
            conversations.remember(prompt, sample, messages[k], CLOSING)
    return conversations, prompts


@pytest.mark.parametrize("tools", [(), TOOLS], ids=["no-tools", "tools"])
async def test_delta_rendering_is_token_identical_to_whole_rendering_for_the_model_template(
    vocab: Vocab, model_template: str, tools: Sequence[ToolSpec]
) -> None:
    renderer = ChatRenderer(model_template)
    assert not renderer.native_tools  # SmolLM2: tools in the system prompt, calls as text
    conversations, prompts = await play(vocab, renderer, CONVERSATION, tools)
    assert len(prompts) == 5
    assert conversations.stats.continued == 4 and conversations.stats.fallbacks == {}
    # Without a system message the template writes its own first: still prefix-stable.
    conversations, _ = await play(vocab, renderer, CONVERSATION[1:], tools)
    assert conversations.stats.continued == 4


async def test_delta_rendering_of_a_native_tool_template(vocab: Vocab) -> None:
    renderer = ChatRenderer(NATIVE_TEMPLATE)
    assert renderer.native_tools
    conversations, _ = await play(vocab, renderer, CONVERSATION, TOOLS)
    assert conversations.stats.continued == 4 and conversations.stats.fallbacks == {}


@pytest.mark.parametrize("template", [COUNTING_TEMPLATE, THINKING_TEMPLATE], ids=["counting", "thinking"])
async def test_a_template_that_is_not_prefix_stable_is_rendered_whole(vocab: Vocab, template: str) -> None:
    renderer = ChatRenderer(template)
    reply = "<think>greet back</think>hello"
    messages = [ChatMessage("user", "hi"), ChatMessage("assistant", reply), ChatMessage("user", "bye")]
    assert renderer.continuation(messages, 1) is None
    conversations = Conversations()
    first = await conversations.prompt(vocab, renderer, messages[:1])
    conversations.remember(first, vocab.ids(reply + CLOSING), messages[1], CLOSING)
    second = await conversations.prompt(vocab, renderer, messages)
    assert second.continued == 0 and second.ids == vocab.ids(renderer.render(messages))
    assert conversations.stats.fallbacks == {"template_not_prefix_stable": 1}
    # The identity test would notice: its play of this template fails.
    with pytest.raises(AssertionError):
        await play(vocab, renderer, messages, ())


async def test_continuation_text_is_what_follows_the_reply_body(model_template: str) -> None:
    renderer = ChatRenderer(model_template)
    messages = [ChatMessage("user", "hi"), ChatMessage("assistant", "hello"), ChatMessage("user", "bye")]
    assert renderer.continuation(messages, 1) == (
        "<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n"
    )
    assert renderer.continuation(messages, 0) is None  # not an assistant message
    assert renderer.continuation(messages[:1], 1) is None


async def test_a_reply_the_harness_sends_back_reformatted_still_matches(vocab: Vocab, model_template: str) -> None:
    """Whitespace around the content, renamed call ids, re-serialised arguments: the same reply."""
    renderer = ChatRenderer(model_template)
    conversations = Conversations()
    user = ChatMessage("user", "list files")
    first = await conversations.prompt(vocab, renderer, [user], TOOLS)
    sampled = vocab.ids(' Let me look.\n<tool_call>\n{"name":"shell","arguments":{"command":"ls"}}\n</tool_call>')
    reply = ChatMessage("assistant", " Let me look.\n", (ToolCall("call_1", "shell", '{"command":"ls"}'),))
    conversations.remember(first, [*sampled, 2], reply, CLOSING)
    back = ChatMessage("assistant", "Let me look.", (ToolCall("toolu_x", "shell", '{ "command": "ls" }'),))
    result = ChatMessage("tool", "a.txt", tool_call_id="toolu_x")
    second = await conversations.prompt(vocab, renderer, [user, back, result], TOOLS)
    kept = [*first.ids, *sampled, 2]
    assert second.continued == len(kept) and second.ids[: len(kept)] == kept
    assert second.ids[len(kept) :] == vocab.ids(
        "\n<|im_start|>user\n<tool_response>\na.txt\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    # Other arguments, another tool list, or another content: not the reply that was sampled.
    for messages, tools in [
        (
            [user, ChatMessage("assistant", "Let me look.", (ToolCall("c", "shell", '{"command": "pwd"}'),)), result],
            TOOLS,
        ),
        ([user, back, result], TOOLS[:1]),
        ([user, ChatMessage("assistant", "Let me see."), result], TOOLS),
    ]:
        other = await conversations.prompt(vocab, renderer, messages, tools)
        assert other.continued == 0 and other.ids == vocab.ids(renderer.render(messages, tools))


async def test_a_reply_cut_short_gets_the_template_closing_and_an_unknown_end_falls_back(
    vocab: Vocab, model_template: str
) -> None:
    renderer = ChatRenderer(model_template)
    messages = [ChatMessage("user", "count"), ChatMessage("assistant", "1, 2, 3"), ChatMessage("user", "more")]
    conversations = Conversations()
    first = await conversations.prompt(vocab, renderer, messages[:1])
    cut = vocab.ids("1, 2, 3")  # the token limit: no end-of-generation token
    conversations.remember(first, cut, messages[1], None)
    second = await conversations.prompt(vocab, renderer, messages)
    assert second.ids == [
        *first.ids,
        *cut,
        *vocab.ids("<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n"),
    ]
    # Ended with an end-of-generation token the template does not close the turn with.
    conversations = Conversations()
    first = await conversations.prompt(vocab, renderer, messages[:1])
    conversations.remember(first, [*cut, 0], messages[1], "<|endoftext|>")
    second = await conversations.prompt(vocab, renderer, messages)
    assert second.continued == 0 and second.ids == vocab.ids(renderer.render(messages))
    assert conversations.stats.fallbacks == {"closing_differs": 1}


async def test_the_longest_kept_exchange_wins_and_an_edit_forks_from_the_last_good_one(
    vocab: Vocab, model_template: str
) -> None:
    renderer = ChatRenderer(model_template)
    conversations = Conversations()
    m = [
        ChatMessage("user", "a"),
        ChatMessage("assistant", "b"),
        ChatMessage("user", "c"),
        ChatMessage("assistant", "d"),
        ChatMessage("user", "e"),
    ]
    p1 = await conversations.prompt(vocab, renderer, m[:1])
    conversations.remember(p1, [*vocab.ids("b"), 2], m[1], CLOSING)
    p2 = await conversations.prompt(vocab, renderer, m[:3])
    conversations.remember(p2, [*vocab.ids("d"), 2], m[3], CLOSING)
    p3 = await conversations.prompt(vocab, renderer, m)
    assert p3.continued == len(p2.ids) + 2
    edited = [*m[:3], ChatMessage("assistant", "D!"), m[4]]
    p4 = await conversations.prompt(vocab, renderer, edited)
    assert p4.continued == len(p1.ids) + 2 and p4.ids == vocab.ids(renderer.render(edited))
    first_edited = [ChatMessage("user", "A"), *m[1:]]
    p5 = await conversations.prompt(vocab, renderer, first_edited)
    assert p5.continued == 0 and p5.ids == vocab.ids(renderer.render(first_edited))


async def test_eviction_by_count_and_by_bytes(vocab: Vocab, model_template: str) -> None:
    renderer = ChatRenderer(model_template)

    async def exchange(conversations: Conversations, word: str) -> ChatPrompt:
        p = await conversations.prompt(vocab, renderer, [ChatMessage("user", word)])
        conversations.remember(p, [*vocab.ids(word.upper()), 2], ChatMessage("assistant", word.upper()), CLOSING)
        return p

    async def continues(conversations: Conversations, word: str) -> bool:
        messages = [ChatMessage("user", word), ChatMessage("assistant", word.upper()), ChatMessage("user", "?")]
        return (await conversations.prompt(vocab, renderer, messages)).continued > 0

    by_count = Conversations(max_entries=2)
    for word in ("one", "two", "three"):
        await exchange(by_count, word)
    assert len(by_count) == 2 and by_count.stats.evicted == 1
    assert not await continues(by_count, "one")
    assert await continues(by_count, "two")  # now the most recently used
    await exchange(by_count, "four")
    assert not await continues(by_count, "three") and await continues(by_count, "two")

    p = await exchange(Conversations(), "one")
    size = 4 * (len(p.ids) + 2) + 256
    by_bytes = Conversations(max_bytes=2 * size + 10)
    for word in ("one", "two", "six"):  # same lengths
        await exchange(by_bytes, word)
    assert len(by_bytes) == 2 and by_bytes.nbytes <= 2 * size + 10
    assert not await continues(by_bytes, "one") and await continues(by_bytes, "six")
    health = by_bytes.as_json()
    assert health["entries"] == 2 and health["evicted"] == 1 and health["continued"] == 1


async def test_off_renders_every_prompt_whole(
    vocab: Vocab, model_template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    renderer = ChatRenderer(model_template)
    off = Conversations(enabled=False)
    messages = [ChatMessage("user", "a"), ChatMessage("assistant", "b"), ChatMessage("user", "c")]
    p1 = await off.prompt(vocab, renderer, messages[:1])
    off.remember(p1, [*vocab.ids("bb"), 2], messages[1], CLOSING)
    assert len(off) == 0
    p2 = await off.prompt(vocab, renderer, messages)
    assert p2.continued == 0 and p2.ids == vocab.ids(renderer.render(messages))

    monkeypatch.delenv(ENV_FLAG, raising=False)
    assert continuation_from_env() and parse_args([])[0].token_continuation
    assert not parse_args(["--no-token-continuation"])[0].token_continuation
    for value in ("0", "false", "off", "NO"):
        monkeypatch.setenv(ENV_FLAG, value)
        assert not continuation_from_env() and not parse_args([])[0].token_continuation
    monkeypatch.setenv(ENV_FLAG, "1")
    config = parse_args(["--continuation-entries", "7", "--continuation-bytes", "1M"])[0]
    assert config.token_continuation and config.continuation_entries == 7
    assert config.continuation_bytes == 1024**2
