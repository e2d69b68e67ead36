"""Pure pieces of the model server: stop sequences, sampling, validation, templates."""

from __future__ import annotations

import numpy as np
import pytest

from sclated.errors import InvalidArgument
from sclated.model import ChatMessage, ChatRenderer, SamplingParams, ToolCall, ToolSpec
from sclated.model._common import Fields
from sclated.model._engine import _sample, _TextStream, prompt_seed

SMOL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def feed_all(stream: _TextStream, pieces: list[str]) -> tuple[str, str | None]:
    out = ""
    for p in pieces:
        text, hit = stream.feed(p.encode())
        out += text
        if hit is not None:
            return out, hit
    return out + stream.flush(), None


def test_stop_sequence_split_across_tokens_never_leaks() -> None:
    stream = _TextStream(["STOP"])
    released = [stream.feed(p.encode()) for p in ["ab", "cS", "TO", "P tail"]]
    assert released[0] == ("ab", None)
    assert released[1] == ("c", None)  # "S" held: it may start "STOP"
    assert released[2] == ("", None)
    assert released[3] == ("", "STOP")


def test_held_text_is_released_when_it_is_not_a_stop() -> None:
    assert feed_all(_TextStream(["STOP"]), ["x S", "T", "ay"]) == ("x STay", None)
    assert feed_all(_TextStream(["\n\n", "END"]), ["one\n", "\ntwo"]) == ("one", "\n\n")


def test_multibyte_characters_split_across_tokens() -> None:
    stream = _TextStream([])
    data = "é✓".encode()
    out = "".join(stream.feed(data[i : i + 1])[0] for i in range(len(data)))
    assert out + stream.flush() == "é✓"


def test_sampling_greedy_seeded_and_nucleus() -> None:
    logits = np.log(np.array([0.05, 0.6, 0.3, 0.05]))
    assert _sample(logits, SamplingParams(temperature=0.0), np.random.default_rng()) == 1
    params = SamplingParams(temperature=1.0, seed=7)
    a = [_sample(logits, params, np.random.default_rng(7)) for _ in range(5)]
    b = [_sample(logits, params, np.random.default_rng(7)) for _ in range(5)]
    assert a == b
    rng = np.random.default_rng(0)
    nucleus = {_sample(logits, SamplingParams(temperature=1.0, top_p=0.5), rng) for _ in range(200)}
    assert nucleus == {1}
    top2 = {_sample(logits, SamplingParams(temperature=1.0, top_k=2), rng) for _ in range(300)}
    assert top2 == {1, 2}


def test_fields_name_the_bad_field() -> None:
    f = Fields({"n": "3", "t": 9.0, "flag": 1, "stop": [1], "sub": {"x": []}})
    with pytest.raises(InvalidArgument) as exc:
        f.opt_int("n")
    assert exc.value.field == "n"
    with pytest.raises(InvalidArgument, match="<= 2"):
        f.opt_float("t", maximum=2.0)
    with pytest.raises(InvalidArgument):
        f.opt_bool("flag")
    with pytest.raises(InvalidArgument) as exc:
        f.stops("stop")
    assert exc.value.field == "stop"
    sub = f.opt_obj("sub")
    assert sub is not None
    with pytest.raises(InvalidArgument) as exc:
        sub.opt_str("x")
    assert exc.value.field == "sub.x"
    with pytest.raises(InvalidArgument) as exc:
        Fields([1, 2])
    assert exc.value.field == "body"


def test_smollm_template_renders_chatml_with_tools_in_system_prompt() -> None:
    renderer = ChatRenderer(SMOL_TEMPLATE)
    assert not renderer.native_tools
    plain = renderer.render([ChatMessage("user", "hi")])
    assert plain == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    tools = [ToolSpec("search", "Search", {"type": "object"})]
    transcript = [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "find cats"),
        ChatMessage("assistant", "", (ToolCall("call_1", "search", '{"q": "cats"}'),)),
        ChatMessage("tool", "3 cats", tool_call_id="call_1"),
    ]
    text = renderer.render(transcript, tools)
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou may call one or more functions")
    call = '<|im_start|>assistant\n<tool_call>\n{"name": "search", "arguments": {"q": "cats"}}'
    assert call in text
    assert "<|im_start|>user\n<tool_response>\n3 cats\n</tool_response><|im_end|>" in text
    assert "<tools>" not in renderer.render(transcript, tools, tool_mode="none")


def test_native_tool_template_gets_structured_tools() -> None:
    template = (
        "{% if tools %}TOOLS={{ tools | tojson }}\n{% endif %}"
        "{% for m in messages %}{{ m.role }}:{{ m.content }}"
        "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %}"
        "{{ '\\n' }}"
        "{% endfor %}"
    )
    renderer = ChatRenderer(template)
    assert renderer.native_tools
    text = renderer.render(
        [
            ChatMessage("user", "<b>"),
            ChatMessage("assistant", "", (ToolCall("c", "s", '{"a": 1}'),)),
        ],
        [ToolSpec("s")],
    )
    assert 'TOOLS=[{"type": "function", "function": {"name": "s"' in text
    assert "user:<b>\n" in text
    assert 'assistant:{"a": 1}' in text


def test_empty_transcript_is_rejected() -> None:
    with pytest.raises(InvalidArgument) as exc:
        ChatRenderer(None).render([])
    assert exc.value.field == "messages"


def test_a_prompt_without_a_seed_samples_with_one_of_its_own() -> None:
    assert prompt_seed([1, 2, 3]) == prompt_seed([1, 2, 3])
    assert prompt_seed([1, 2, 3]) != prompt_seed([1, 2, 4])
    assert prompt_seed([1, 2, 3]) != prompt_seed([3, 2, 1])
    assert 0 <= prompt_seed([]) < 2**64
