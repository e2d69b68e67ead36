"""The embedded model server: a GGUF served by llama.cpp over HTTP, and the
daemon's supervisor of it as a child process (:class:`EmbeddedModel`).

Speaks OpenAI chat/completions, the OpenAI Responses API and Anthropic
Messages, streaming and not, with tool calls in each API's shape and vLLM-style
token data (``prompt_token_ids``, ``token_ids``, logprobs) on request, so the
capture proxy can record calls at token level. A requested JSON output
(``response_format``, the Responses API's ``text.format``) is enforced by
grammar-constrained sampling, so even a tiny model replies in valid JSON.
A chat request that extends an earlier exchange (its messages, then the reply
the server sent) is prompted with that exchange's exact token ids followed by
the template's text after the reply (``_continuation``), so a conversation's
prompts extend each other token for token, as the capture needs.

    server = await start_model_server(ModelServerConfig(port=0))
    ...  # POST f"{server.url}/v1/chat/completions"
    await server.close()
"""

from ._chat import ChatMessage, ChatRenderer
from ._common import ServerContext
from ._config import ModelServerConfig, default_gguf_path
from ._continuation import ENV_FLAG as TOKEN_CONTINUATION_ENV
from ._continuation import ChatPrompt, Conversations, continuation_from_env
from ._engine import (
    PROMPT_TOO_LONG,
    Backend,
    ContextInfo,
    Engine,
    Finish,
    PromptStats,
    SamplingParams,
    TokenStep,
    TopLogprob,
)
from ._grammar import json_object_grammar, json_schema_grammar, response_format_grammar, text_format_grammar
from ._server import RunningModelServer, build_app, serve_forever, start_model_server
from ._service import EmbeddedModel, ModelState, ModelStatus
from ._tools import ParsedOutput, ToolCall, ToolSpec, parse_tool_calls, tool_call_start

__all__ = [
    "PROMPT_TOO_LONG",
    "TOKEN_CONTINUATION_ENV",
    "Backend",
    "ChatMessage",
    "ChatPrompt",
    "ChatRenderer",
    "ContextInfo",
    "Conversations",
    "EmbeddedModel",
    "Engine",
    "Finish",
    "ModelServerConfig",
    "ModelState",
    "ModelStatus",
    "ParsedOutput",
    "PromptStats",
    "RunningModelServer",
    "SamplingParams",
    "ServerContext",
    "TokenStep",
    "ToolCall",
    "ToolSpec",
    "TopLogprob",
    "build_app",
    "continuation_from_env",
    "default_gguf_path",
    "json_object_grammar",
    "json_schema_grammar",
    "parse_tool_calls",
    "response_format_grammar",
    "serve_forever",
    "start_model_server",
    "text_format_grammar",
    "tool_call_start",
]
