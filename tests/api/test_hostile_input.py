"""Inputs `sclated bench fuzz` found answered with INTERNAL/UNKNOWN or with an error that named
nothing; each must be a clean refusal naming the field, and the daemon must go on."""

from __future__ import annotations

import math
from collections.abc import Callable

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb

from sclated.api import MAX_STATUS_MESSAGE_BYTES, MAX_TRAILER_CHARS
from tests.api.conftest import Api, synthetic_request
from tests.api.test_api import expect_error


async def _raw(api: Api, method: str, data: bytes, *, stream: bool = False, token: str | None = None) -> None:
    path = f"/sclate.v1.Sclate/{method}"
    md = api.md(token)
    if stream:
        call = api.channel.unary_stream(path, request_serializer=None, response_deserializer=None)(data, metadata=md)
        async for _ in call:
            pass
        return
    await api.channel.unary_unary(path, request_serializer=None, response_deserializer=None)(data, metadata=md)


@pytest.mark.parametrize(
    ("method", "data", "stream"),
    [
        ("GetRun", b"\xff\xff\xff", False),  # wire format corrupt
        ("ListRuns", b"\x0a\xff\xff\xff\xff\x0f", False),  # a length past the end
        ("DeleteRun", b"\x0a\x04\xff\xfe\xc0\x80", False),  # a string that is not UTF-8
        ("WatchRun", b"\x02\x01x", True),  # field number 0
    ],
)
async def test_bytes_that_are_not_the_request_message_are_invalid_argument(
    api: Api, method: str, data: bytes, stream: bool
) -> None:
    # gRPC answered UNKNOWN ("Unexpected DecodeError") before the interceptor saw the call.
    err = await expect_error(_raw(api, method, data, stream=stream), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "request" and err["sclate-reason"] == "MALFORMED_REQUEST"
    assert "not a valid message" in err["details"]
    assert (await api.stub.ListBenchmarks(pb.ListBenchmarksRequest())).benchmarks


async def test_a_struct_nested_past_the_parsers_limit_is_invalid_argument(api: Api) -> None:
    req = synthetic_request()
    level = req.run.benchmark.options
    for _ in range(60):
        level = level.fields["a"].struct_value
    err = await expect_error(_raw(api, "CreateRun", req.SerializeToString()), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "request"
    assert (await api.stub.ListRuns(pb.ListRunsRequest())).runs == []


async def test_undecodable_bytes_without_a_token_are_unauthenticated_first(
    tenant_api: Callable[[str | None], Api],
) -> None:
    anonymous = tenant_api(None)
    await expect_error(_raw(anonymous, "GetRun", b"\xff\xff"), grpc.StatusCode.UNAUTHENTICATED)
    alice = tenant_api("alice")
    err = await expect_error(_raw(alice, "GetRun", b"\xff\xff"), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "request"


@pytest.mark.parametrize(("key", "value"), [("days", math.nan), ("spacing_s", math.inf), ("x", -math.inf)])
async def test_nan_or_infinity_in_options_is_invalid_argument_naming_the_key(api: Api, key: str, value: float) -> None:
    # json_format refused to convert them and the call ended INTERNAL.
    req = synthetic_request()
    req.run.benchmark.options[key] = value
    err = await expect_error(api.stub.CreateRun(req), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == f"run.benchmark.options.{key}"
    nested = synthetic_request()
    nested.run.agent.options.update({"deep": {"list": [1, {"v": math.nan}]}})
    err = await expect_error(api.stub.CreateRun(nested), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "run.agent.options.deep.list[1].v"
    assert (await api.stub.ListRuns(pb.ListRunsRequest())).runs == []


@pytest.mark.parametrize(("seconds", "nanos"), [(2**62, 0), (253402300800, 0), (-62135596801, 0), (0, -5), (0, 10**9)])
async def test_an_invalid_start_time_is_invalid_argument(api: Api, seconds: int, nanos: int) -> None:
    # Timestamp.ToNanoseconds raised ValueError: INTERNAL.
    req = synthetic_request()
    req.run.clock.start_time.seconds = seconds
    req.run.clock.start_time.nanos = nanos
    err = await expect_error(api.stub.CreateRun(req), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "run.clock.start_time"


async def test_an_error_quoting_a_huge_input_stays_within_a_clients_header_limit(api: Api) -> None:
    # The message quoted the whole name: the client refused the trailers ("metadata size
    # exceeds hard limit") and reported its own RESOURCE_EXHAUSTED, naming nothing.
    for name in ("x" * 30_000, "é" * 5000, "runs/" + "a" * 1_000_000):
        err = await expect_error(api.stub.GetRun(pb.GetRunRequest(name=name)), grpc.StatusCode.INVALID_ARGUMENT)
        assert err["sclate-field"] == "name"
        assert len(err["details"].encode()) <= MAX_STATUS_MESSAGE_BYTES
        assert err["details"].startswith("name '") and "more characters)" in err["details"]


@pytest.mark.parametrize("key", ["é", "a\x00", "a\nb", "🙂", "k" * 5000])
async def test_a_field_named_after_an_unprintable_label_key_is_escaped(api: Api, key: str) -> None:
    # The field trailer held the key as given; gRPC refuses such a header value and ended
    # the call INTERNAL ("Invalid metadata").
    req = synthetic_request()
    req.run.labels[key] = "v"
    err = await expect_error(api.stub.CreateRun(req), grpc.StatusCode.INVALID_ARGUMENT)
    field = err["sclate-field"]
    assert field.startswith("run.labels.") and len(field) <= MAX_TRAILER_CHARS
    assert all(" " <= c <= "~" for c in field)
    if len(key) < 10:
        assert field == "run.labels." + key.encode("unicode_escape").decode()
