"""Requests for every method of sclate.v1, generated from its descriptors (the API fuzz part).

:class:`RequestGenerator` makes case ``i`` from ``random.Random(f"{seed}:{i}")``
alone, so a finding names a case that can be made again by itself. The method
of case ``i`` is ``METHODS[i % len(METHODS)]`` (every method gets its share);
the sending tenant and the strategy are drawn:

* ``valid``: a well-formed request about the sender's own resources;
* ``mutate``: the same with one to three fields (found by walking the
  descriptors, nested messages included) set to boundary or malformed values;
* ``random``: every field of the message set or left unset at random, each
  from the values of its type (and of its name, for resource names, filters,
  page tokens, formats);
* ``cross``: a well-formed request naming the *other* tenant's runs,
  snapshots, groups, labels or run directory;
* ``auth``: a well-formed request with no token, another scheme, an empty or
  unknown token;
* ``wire``: bytes that are not a valid message of the method's request type
  (random bytes, truncated or padded messages, wrong wire types, invalid
  UTF-8, a Struct nested past the parser's depth limit);
* ``race``: a well-formed request sent two to four times at once (a client
  retrying: the same run id, request id, group id, snapshot id).

Values per type: strings (empty, the 63/64-character edges of ids, 4 KiB+1,
1-4 MiB, NUL, ``../``, bidi and emoji, injection-shaped text), integers (0,
±1, int32/int64 edges), doubles (NaN, ±inf, -0.0, 1e308, the smallest
subnormal), enums (unknown numbers), repeated fields and maps up to 10,000
entries (label sets of 64, 65, 1,000), Structs (known option keys with
out-of-range, NaN, string, list and nested values; nesting up to 30 levels;
thousands of keys), Timestamps outside the valid range or with bad nanos.

A tenant only ever names the other tenant's resources in fields that *refer*
to something (a run, a snapshot, a group, a filter, a data path), never in
the ids or labels of what it creates, so any string of one tenant's
(:attr:`TenantPools.secrets`) in an answer to the other that the request did
not carry is a leak.
"""

from __future__ import annotations

import base64
import json
import math
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from sclate_api.v1 import sclate_pb2 as pb

__all__ = [
    "METHODS",
    "MUTATING",
    "SERVICE",
    "STRATEGIES",
    "Case",
    "RequestGenerator",
    "TenantPools",
    "message_class",
]

SERVICE = pb.DESCRIPTOR.services_by_name["Sclate"]
METHODS: tuple[MethodDescriptor, ...] = tuple(SERVICE.methods)
MUTATING = frozenset(
    {"CreateRun", "CancelRun", "DeleteRun", "ResumeRun", "SaveSnapshot", "RestoreSnapshot", "BranchRun"}
)
"""Methods that change the daemon's state when they succeed (checked for changes when they fail)."""

STRATEGIES: tuple[tuple[str, float], ...] = (
    ("valid", 0.16),
    ("mutate", 0.38),
    ("random", 0.13),
    ("cross", 0.14),
    ("auth", 0.06),
    ("wire", 0.07),
    ("race", 0.06),
)

_HUGE_SHARE = 0.004
"""Share of string values that are 1-4 MiB (each costs a few milliseconds on both sides)."""


def message_class(descriptor: Descriptor) -> type[Message]:
    cls: type[Message] = message_factory.GetMessageClass(descriptor)
    return cls


@dataclass(frozen=True, slots=True)
class TenantPools:
    """What one tenant owns, for requests to name (its own) or to probe with (the other's)."""

    tenant: str
    token: str
    nonce: str
    """In every id and label value the tenant's seeded state and valid requests carry."""
    runs: tuple[str, ...]
    """``runs/{id}`` of its seeded runs (finished and live)."""
    live_runs: tuple[str, ...]
    """Runs that stay RUNNING during the campaign (snapshots can be taken of them)."""
    snapshots: tuple[str, ...]
    """Snapshots of short runs (a restore or branch from them finishes in seconds)."""
    groups: tuple[str, ...]
    label_values: tuple[str, ...]
    run_dirs: tuple[str, ...] = ()
    """Its runs' directories on the daemon's host (a path no run may read)."""

    @property
    def secrets(self) -> frozenset[str]:
        """Strings only this tenant's answers may hold."""
        ids = {n.rpartition("/")[2] for n in (*self.runs, *self.live_runs, *self.snapshots)}
        return frozenset({self.tenant, *ids, *self.groups, *self.label_values, self.owner_label})

    @property
    def owner_label(self) -> str:
        """The label value every run it creates in the campaign carries."""
        return f"{self.nonce}-owner"


@dataclass(slots=True)
class Case:
    index: int
    method: MethodDescriptor
    tenant: str
    """The tenant whose token is sent ("" when the strategy sends none of a tenant's)."""
    strategy: str
    request: Message | None
    raw: bytes | None = None
    """``wire``: the bytes sent instead of a message."""
    metadata: tuple[tuple[str, str], ...] = ()
    fuzzed: tuple[str, ...] = ()
    """The fields the strategy set to hostile values (for findings)."""
    check_state: bool = False
    """Run alone, with the store's state read before and after (a mutating method)."""
    copies: int = 1
    """``race``: how many times the request is sent at once."""
    note: str = ""

    @property
    def mutating(self) -> bool:
        return self.method.name in MUTATING

    def describe(self) -> str:
        what = ",".join(self.fuzzed) or self.note or "-"
        return f"case {self.index} {self.method.name} [{self.strategy}] {what}"

    def request_bytes(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return b"" if self.request is None else self.request.SerializeToString()


# -- values ---------------------------------------------------------------------------------

_INT32 = (0, 1, -1, 2, 63, 64, 65, 1000, 1001, 2**31 - 1, -(2**31))
_INT64 = (0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63))
_DOUBLES = (0.0, -0.0, 1.0, -1.0, 0.5, math.nan, math.inf, -math.inf, 1e308, 5e-324, 1e6, 1e6 + 1)
_STRINGS = (
    "",
    " ",
    "a",
    "x" * 63,
    "x" * 64,
    "a" + "b" * 61 + "c",
    "A",
    "-",
    "a-",
    "x" * 4097,
    "\x00",
    "a\x00b",
    "../../../etc/passwd",
    "..",
    "/",
    "//",
    "runs/",
    "runs//",
    "runs/../x",
    "runs/a/snapshots/",
    "runs/a/snapshots/b/c",
    "runs/%2e%2e",
    "runs/A",
    "runs/a b",
    "é",
    "日本語のラン",
    "🙂" * 100,
    "\u202eevil",
    "\ufeffbom",
    "\r\nx-injected: 1",
    "%s%n%x",
    "'; DROP TABLE runs; --",
    '" OR 1=1 --',
    "${jndi:ldap://x}",
    "{{7*7}}",
    "null",
    "NaN",
    "-1",
    "{}",
    "\t\n",
    "ü" * 5000,
)
_PATHS = (
    "/etc",
    "/etc/passwd",
    "/proc/self/environ",
    "/",
    "../../..",
    "relative/dir",
    "/tmp",
    "/dev/zero",
    "/nonexistent/data",
    "\x00/etc",
)
_FILTERS = (
    "state=RUNNING",
    "state=running",
    "state=SUCCEEDED AND benchmark=synthetic",
    "benchmark=synthetic AND harness=scripted",
    "state=NOPE",
    "state=",
    "=x",
    "labels.=x",
    "labels.team=",
    "nope=1",
    "state=RUNNING AND state=PENDING",
    "state=RUNNING OR state=PENDING",
    " AND ",
    "group=" + "g" * 100,
    "labels.team=" + "t" * 5000,
    "state=RUNNING AND " * 2000 + "state=RUNNING",
    'labels.team="quoted"',
    "labels.a=b=c",
)
_FORMATS = ("skyrl", "verl", "atif", "SKYRL", "", "csv", "../verl")
_REWARD_MODES = ("round", "run", "", "RUN", "episode")
_UNREWARDED = ("skip", "refuse", "", "drop")
_ROLES = ("agent", "memory", "aux", "", "AGENT", "memory:mem0", "x" * 300)
_BENCHMARKS = ("synthetic", "metaclaw", "", "nope", "../synthetic", "Synthetic")
_HARNESSES = ("scripted", "", "nope", "../scripted", "Scripted")
_REF_FIELDS = frozenset({"name", "run", "snapshot", "group"})
_DESTRUCTIVE = frozenset({"CancelRunRequest", "DeleteRunRequest"})
_NEW_ID_FIELDS = frozenset({"run_id", "new_run_id", "snapshot_id", "group_id", "request_id"})
_KNOWN_OPTIONS: dict[str, dict[str, tuple[Any, ...]]] = {
    # Known keys of the synthetic benchmark's and the scripted agent's options, with values
    # on and past the edges of what each accepts ("valid" values are small: the runs are real).
    "BenchmarkSpec": {
        "days": (1, 2, 0, -1, 3651, 1.5, 2**63, "2", True, None, [1], {"a": 1}, math.nan, math.inf),
        "events_per_day": (1, 0, 1001, -5, 1e300, "x", False, math.nan),
        "spacing_s": (1, 60, 0, 86_401, -1, 3.5, "60", math.inf),
        "scripts_dir": ("/etc", "../x", 5),
        "seed_dir": ("/proc", None),
        "file": ("../../etc/passwd", ""),
    },
    "AgentSpec": {
        "turn_ms": (0, 1, 5, -1, 600_001, math.nan, math.inf, "5", True, None, [5]),
        "turn_jitter": (0.0, 0.5, 1.0, -0.1, math.nan, "0.1"),
        "fail_on_round": ("", "d0.task0", 7, None, ["d0.task0"]),
        "cron_jobs": ([{"schedule": "* * * * *"}], "not a list", 3),
        "model_grace_s": (-1, math.inf, "x"),
    },
}


@dataclass(slots=True)
class _Ctx:
    """What value pools a case draws on."""

    rng: random.Random
    index: int
    own: TenantPools
    other: TenantPools
    cross: bool = False
    fuzzed: list[str] = field(default_factory=list)


def _huge(rng: random.Random) -> str:
    size = rng.randint(1, 4) * 1024 * 1024 + rng.randint(-100, 100)
    return rng.choice(("x", "é", "0")) * (size // (2 if rng.random() < 0.3 else 1))


def _hostile_string(ctx: _Ctx) -> str:
    rng = ctx.rng
    if rng.random() < _HUGE_SHARE:
        return _huge(rng)
    if rng.random() < 0.15:
        alphabet = string.printable + "éß日🙂\u202e\x00\x7f"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80)))
    return rng.choice(_STRINGS)


def _fresh_id(ctx: _Ctx, prefix: str) -> str:
    return f"{prefix}{ctx.index}-{ctx.rng.randrange(36**4):04x}"


_CREATE_RUN = [m.name for m in METHODS].index("CreateRun")


def _created_run(ctx: _Ctx) -> str:
    """``runs/fz{j}``: the run an earlier case ``j`` (a CreateRun) creates when it succeeds."""
    if ctx.index < len(METHODS):
        return "runs/fz-none"
    j = ctx.rng.randrange(ctx.index // len(METHODS)) * len(METHODS) + _CREATE_RUN
    return f"runs/fz{j}"


def _ref(ctx: _Ctx, kind: str) -> str:
    """A reference field: the sender's own (or, crossing, the other tenant's) resource, else a bad one."""
    rng = ctx.rng
    pools = ctx.other if ctx.cross else ctx.own
    r = rng.random()
    if kind == "snapshot":
        if r < 0.75 and pools.snapshots:
            return rng.choice(pools.snapshots)
        live = rng.choice(pools.live_runs) if pools.live_runs else "runs/x"
        return rng.choice((f"{live}/snapshots/nope", "runs/a/snapshots/", f"{live}/snapshots/../x", live))
    if kind == "group":
        if r < 0.75 and pools.groups:
            return rng.choice(pools.groups)
        return rng.choice(("g-nope", "", "G", "../g", "g" * 64))
    if r < 0.75:
        return rng.choice((*pools.runs, *pools.live_runs) or ("runs/x",))
    if r < 0.85 and not ctx.cross:
        return _created_run(ctx)
    return rng.choice(("runs/nope", "runs/", "run/x", "runs/x/y", "x", "runs/" + "a" * 63, "runs/" + "a" * 64))


def _page_token(ctx: _Ctx) -> str:
    rng = ctx.rng

    def tok(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return rng.choice(
        (
            "",
            tok({"after": 1, "f": "e3b0c44298fc1c14"}),  # the hash of the empty filter
            tok({"after": -1, "f": "e3b0c44298fc1c14"}),
            tok({"after": 2**70, "f": "e3b0c44298fc1c14"}),
            tok({"after": "x", "f": "e3b0c44298fc1c14"}),
            tok({"after": 1e308, "f": "e3b0c44298fc1c14"}),
            tok({"after": None, "f": None}),
            tok({"after": 1}),
            tok([1, 2]),
            tok("after"),
            tok({"after": 1, "f": "0000000000000000"}),
            "not base64 !!",
            "====",
            "eyJ",
            "\x00",
            "a" * 10_000,
            base64.b64encode(bytes(rng.randrange(256) for _ in range(32))).decode(),
        )
    )


def _filter(ctx: _Ctx) -> str:
    rng = ctx.rng
    pools = ctx.other if ctx.cross else ctx.own
    options = [*_FILTERS]
    options += [f"labels.team={v}" for v in pools.label_values] + [f"group={g}" for g in pools.groups]
    options.append(f"labels.owner={pools.owner_label}")
    return rng.choice(options)


def _string_for(ctx: _Ctx, owner: str, name: str, hostile: bool) -> str:
    """A value for string field ``owner.name``: plausible for its meaning, or hostile."""
    rng = ctx.rng
    if hostile and rng.random() < 0.5:
        return _hostile_string(ctx)
    if name == "name" and owner in _DESTRUCTIVE and not ctx.cross:
        return _created_run(ctx)  # never the seeded runs: the campaign needs them
    if name in _REF_FIELDS and owner != "BenchmarkSpec":
        kind = "snapshot" if name == "snapshot" else "group" if name == "group" else "run"
        return _ref(ctx, kind)
    if name in _NEW_ID_FIELDS:
        if hostile:
            return rng.choice(("", "A", "a-", "x" * 64, "a" * 63, "-a", "a_b", "9a", "a/b", _hostile_string(ctx)))
        return _fresh_id(ctx, "fx")
    if name == "page_token":
        return _page_token(ctx)
    if name == "filter":
        return _filter(ctx)
    if name == "format":
        return rng.choice(_FORMATS)
    if name == "reward_mode":
        return rng.choice(_REWARD_MODES)
    if name == "unrewarded":
        return rng.choice(_UNREWARDED)
    if name in ("roles", "trainable_roles"):
        return rng.choice(_ROLES)
    if name == "data_dir":
        pools = ctx.other if ctx.cross else ctx.own
        return rng.choice((*_PATHS, *pools.run_dirs))
    if owner == "BenchmarkSpec" and name == "name":
        return rng.choice(_BENCHMARKS)
    if name == "scenario":
        return rng.choice(("", "tiny", "default", "nope", "../tiny", "TINY"))
    if name == "subset":
        return rng.choice(("day01", "d0", "", "../day01", "x" * 200))
    if name == "harness":
        return rng.choice(_HARNESSES)
    if name == "base_url":
        return rng.choice(("", "http://127.0.0.1:1", "ftp://x", "http://", "https://example.invalid/v1", "javascript:"))
    if name == "api":
        return rng.choice(("openai", "anthropic", "", "grpc"))
    if name == "api_key_env":
        return rng.choice(("", "PATH", "HOME", "1BAD", "sk-live-123", "A" * 129))
    if name == "memory":
        return rng.choice(("", "native", "mem0", "nope"))
    return _hostile_string(ctx)


def _scalar(ctx: _Ctx, f: FieldDescriptor, owner: str, hostile: bool) -> Any:
    rng = ctx.rng
    t = f.type
    if t == FieldDescriptor.TYPE_STRING:
        return _string_for(ctx, owner, f.name, hostile)
    if t == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if t == FieldDescriptor.TYPE_ENUM:
        values = [v.number for v in f.enum_type.values]
        return rng.choice((*values, -1, 7, 99, 2**31 - 1, -(2**31)))
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice(_DOUBLES) if hostile or rng.random() < 0.5 else rng.uniform(0, 10)
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return rng.choice(_INT32) if hostile or rng.random() < 0.5 else rng.randint(0, 10)
    if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return rng.choice(_INT64) if hostile or rng.random() < 0.5 else rng.randint(0, 10)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return rng.choice((0, 1, 2**32 - 1))
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return rng.choice((0, 1, 2**64 - 1))
    if t == FieldDescriptor.TYPE_BYTES:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    raise TypeError(f"no values for field type {t} ({f.full_name})")


def _json_value(ctx: _Ctx, depth: int = 0) -> Any:
    rng = ctx.rng
    kinds = ["num", "str", "bool", "null"] + (["list", "obj"] if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "num":
        return rng.choice((*_DOUBLES, 0, 1, -1, 2**63, rng.randint(-5, 5)))
    if kind == "str":
        return _hostile_string(ctx)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [_json_value(ctx, depth + 1) for _ in range(rng.randint(0, 4))]
    return {_hostile_key(ctx): _json_value(ctx, depth + 1) for _ in range(rng.randint(0, 4))}


def _hostile_key(ctx: _Ctx) -> str:
    rng = ctx.rng
    if rng.random() < 0.7:
        return rng.choice(("a", "team", "x-y", "k.v", "a_b", "zz"))
    s = _hostile_string(ctx)
    return s if len(s) < 100_000 else s[:100_000]


def _struct_value(ctx: _Ctx, owner: str, hostile: bool) -> dict[str, Any] | str:
    """A Struct's content as a dict, or a marker for a shape built directly ("deep:N", "wide:N")."""
    rng = ctx.rng
    known = _KNOWN_OPTIONS.get(owner, {})
    r = rng.random()
    if hostile and r < 0.08:
        return f"deep:{rng.choice((10, 20, 30))}"
    if hostile and r < 0.14:
        return f"wide:{rng.choice((1000, 5000))}"
    if hostile and r < 0.18:
        return {"blob": "x" * rng.choice((65_536, 70_000))}
    out: dict[str, Any] = {}
    for key, values in known.items():
        if rng.random() < 0.4:
            out[key] = rng.choice(values)
    if hostile:
        for _ in range(rng.randint(0, 3)):
            out[_hostile_key(ctx)] = _json_value(ctx)
    return out


def _fill_struct(target: Message, content: dict[str, Any] | str) -> None:
    """Fill a google.protobuf.Struct without json_format (which refuses NaN and deep nesting)."""
    if isinstance(content, str):
        shape, _, n = content.partition(":")
        count = int(n)
        if shape == "deep":
            cur: Any = target
            for _ in range(count):
                cur = cur.fields["a"].struct_value
            cur.fields["leaf"].number_value = 1.0
        else:
            for i in range(count):
                target.fields[f"k{i}"].number_value = float(i)  # type: ignore[attr-defined]
        return
    for key, value in content.items():
        _set_value(target.fields[key], value)  # type: ignore[attr-defined]


def _set_value(v: Any, value: Any) -> None:
    if value is None:
        v.null_value = 0
    elif isinstance(value, bool):
        v.bool_value = value
    elif isinstance(value, int | float):
        v.number_value = float(value)
    elif isinstance(value, str):
        v.string_value = value
    elif isinstance(value, list):
        lst = v.list_value
        lst.SetInParent()
        for item in value:
            _set_value(lst.values.add(), item)
    elif isinstance(value, dict):
        v.struct_value.SetInParent()
        for k, item in value.items():
            _set_value(v.struct_value.fields[k], item)
    else:
        raise TypeError(f"no Struct value for {type(value).__name__}")


def _timestamp(ctx: _Ctx, target: Message, hostile: bool) -> None:
    rng = ctx.rng
    seconds = rng.choice((0, -1, 1767225600, 253402300799, 253402300800, -62135596800, -62135596801, 2**62))
    nanos = rng.choice((0, 0, 999_999_999, 1_000_000_000, -1, 2**31 - 1)) if hostile else 0
    target.seconds = seconds if hostile else 1767225600  # type: ignore[attr-defined]
    target.nanos = nanos  # type: ignore[attr-defined]


def _label_map(ctx: _Ctx, target: Any, hostile: bool) -> None:
    rng = ctx.rng
    if not hostile:
        target["owner"] = ctx.own.owner_label
        return
    size = rng.choice((0, 1, 3, 64, 65, 1000, 10_000 if rng.random() < 0.1 else 100))
    for i in range(size):
        if rng.random() < 0.8:
            key = f"k{i}"
        else:
            key = rng.choice(("", "A", "9", "a" * 63, "a" * 64, "é", "a b", "a\x00", "a/b", f"k{i}.x-y_z"))
        target[key] = _hostile_string(ctx) if rng.random() < 0.3 else "v"


def _repeated_count(ctx: _Ctx, hostile: bool) -> int:
    rng = ctx.rng
    if not hostile:
        return rng.randint(0, 3)
    return rng.choice((0, 1, 2, 3, 64, 65, 1000, 10_001 if rng.random() < 0.1 else 10))


def _fill_field(ctx: _Ctx, msg: Message, f: FieldDescriptor, hostile: bool, depth: int) -> None:
    """Set field ``f`` of ``msg`` from the values of its type (and name)."""
    owner = msg.DESCRIPTOR.name
    mt = f.message_type
    if mt is not None and mt.GetOptions().map_entry:
        target = getattr(msg, f.name)
        if f.name == "labels":
            _label_map(ctx, target, hostile)
            return
        vf = mt.fields_by_name["value"]
        for i in range(_repeated_count(ctx, hostile)):
            target[f"k{i}"] = _scalar(ctx, vf, owner, hostile)
        return
    if mt is not None:
        if mt.full_name == "google.protobuf.Struct":
            if f.is_repeated:
                return
            _fill_struct(getattr(msg, f.name), _struct_value(ctx, owner, hostile))
            getattr(msg, f.name).SetInParent()
            return
        if mt.full_name == "google.protobuf.Timestamp":
            _timestamp(ctx, getattr(msg, f.name), hostile)
            return
        if f.is_repeated:
            for _ in range(min(_repeated_count(ctx, hostile), 50)):
                _fill_message(ctx, getattr(msg, f.name).add(), hostile, depth + 1)
            return
        sub = getattr(msg, f.name)
        sub.SetInParent()
        _fill_message(ctx, sub, hostile, depth + 1)
        return
    if f.is_repeated:
        values = getattr(msg, f.name)
        for _ in range(_repeated_count(ctx, hostile)):
            values.append(_scalar(ctx, f, owner, hostile))
        return
    setattr(msg, f.name, _scalar(ctx, f, owner, hostile))


def _fill_message(ctx: _Ctx, msg: Message, hostile: bool, depth: int = 0) -> None:
    """Set each field of ``msg`` with probability 1/2 (nested messages down to depth 4)."""
    if depth > 4:
        return
    for f in msg.DESCRIPTOR.fields:
        if ctx.rng.random() < 0.5:
            _fill_field(ctx, msg, f, hostile, depth)


def field_paths(descriptor: Descriptor, prefix: str = "", depth: int = 0) -> list[str]:
    """Every field path of a message type (``run.agent.options``), nested messages
    included; Structs, Timestamps and maps are leaves."""
    out: list[str] = []
    for f in descriptor.fields:
        path = f"{prefix}{f.name}"
        out.append(path)
        mt = f.message_type
        if mt is not None and not f.is_repeated and not mt.full_name.startswith("google.protobuf.") and depth < 4:
            out.extend(field_paths(mt, path + ".", depth + 1))
    return out


def _mutate(ctx: _Ctx, msg: Message, path: str) -> None:
    parts = path.split(".")
    target = msg
    for part in parts[:-1]:
        target = getattr(target, part)
    f = target.DESCRIPTOR.fields_by_name[parts[-1]]
    target.ClearField(f.name)
    _fill_field(ctx, target, f, True, 0)


# -- valid requests ------------------------------------------------------------------------


def _create_run(ctx: _Ctx) -> pb.CreateRunRequest:
    rng = ctx.rng
    run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="scripted"))
    run.benchmark.options.update({"days": 1, "events_per_day": 1})
    run.agent.options.update({"turn_ms": rng.choice((0, 1, 5))})
    run.labels["owner"] = ctx.own.owner_label
    return pb.CreateRunRequest(
        run=run,
        run_id=f"fz{ctx.index}",
        request_id=rng.choice(("", f"rq{ctx.index}")),
    )


def _valid(ctx: _Ctx, method: str) -> Message:
    """A well-formed request of ``method`` about the sender's (or, crossing, the other's) resources."""
    rng = ctx.rng
    if method == "CreateRun":
        req = _create_run(ctx)
        if ctx.cross and ctx.other.run_dirs:
            req.run.benchmark.data_dir = rng.choice(ctx.other.run_dirs)
        return req
    if method == "GetRun":
        return pb.GetRunRequest(name=_ref(ctx, "run"))
    if method == "ListRuns":
        return pb.ListRunsRequest(page_size=rng.choice((0, 1, 2, 10, 1000)), filter=rng.choice(("", _filter(ctx))))
    if method in ("CancelRun", "DeleteRun"):
        # Never the seeded runs: the campaign needs them. Crossing, the other's are fair game.
        name = _ref(ctx, "run") if ctx.cross else _created_run(ctx)
        return pb.CancelRunRequest(name=name) if method == "CancelRun" else pb.DeleteRunRequest(name=name)
    if method == "ResumeRun":
        return pb.ResumeRunRequest(name=_ref(ctx, "run"))
    if method == "WatchRun":
        return pb.WatchRunRequest(name=_ref(ctx, "run"), after_seq=rng.choice((0, 0, 1, 5, 10_000)))
    if method == "ListBenchmarks":
        return pb.ListBenchmarksRequest()
    if method == "ListAgents":
        return pb.ListAgentsRequest()
    if method == "SaveSnapshot":
        pools = ctx.other if ctx.cross else ctx.own
        run = rng.choice(pools.live_runs) if pools.live_runs and rng.random() < 0.8 else _ref(ctx, "run")
        return pb.SaveSnapshotRequest(run=run, snapshot_id=_fresh_id(ctx, "fs"), at_turn_boundary=rng.random() < 0.2)
    if method == "RestoreSnapshot":
        req = pb.RestoreSnapshotRequest(snapshot=_ref(ctx, "snapshot"), new_run_id=_fresh_id(ctx, "fr"))
        req.labels["owner"] = ctx.own.owner_label
        return req
    if method == "ListSnapshots":
        return pb.ListSnapshotsRequest(run=_ref(ctx, "run"))
    if method == "BranchRun":
        req = pb.BranchRunRequest(
            snapshot=_ref(ctx, "snapshot"),
            count=rng.choice((1, 2)),
            group_id=_fresh_id(ctx, "fg"),
            request_id=rng.choice(("", f"rb{ctx.index}")),
        )
        req.labels["owner"] = ctx.own.owner_label
        return req
    if method == "WatchGroup":
        return pb.WatchGroupRequest(group=_ref(ctx, "group"))
    if method == "StreamTrajectories":
        return pb.StreamTrajectoriesRequest(run=_ref(ctx, "run"), reward_mode=rng.choice(("", "round", "run")))
    if method == "ExportTrajectories":
        if rng.random() < 0.3:
            return pb.ExportTrajectoriesRequest(group=_ref(ctx, "group"), format=rng.choice(("skyrl", "verl", "atif")))
        return pb.ExportTrajectoriesRequest(run=_ref(ctx, "run"), format=rng.choice(("skyrl", "verl", "atif")))
    raise ValueError(f"no valid request for method {method!r}")


VALID_METHODS: frozenset[str] = frozenset(m.name for m in METHODS)
"""Every method has a valid request (``_valid``); a test holds this to the schema."""


# -- malformed wire bytes ---------------------------------------------------------------------


def _deep_struct_bytes(depth: int) -> bytes:
    s = pb.CreateRunRequest()
    s.run.benchmark.name = "synthetic"
    s.run.agent.harness = "scripted"
    _fill_struct(s.run.benchmark.options, f"deep:{depth}")
    data: bytes = s.SerializeToString()
    return data


def _wire(ctx: _Ctx, method: MethodDescriptor) -> tuple[bytes, str]:
    rng = ctx.rng
    valid = _valid(ctx, method.name).SerializeToString()
    kinds: list[tuple[str, Callable[[], bytes]]] = [
        ("random bytes", lambda: bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))),
        ("truncated", lambda: valid[: rng.randrange(len(valid))] if valid else b"\x0a"),
        ("trailing garbage", lambda: valid + b"\xff\xff\xff"),
        ("wrong wire type", lambda: b"\x0d\x01\x02\x03\x04" + valid),
        ("length past the end", lambda: b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 8),
        ("invalid utf-8 in a string", lambda: b"\x0a\x04\xff\xfe\xc0\x80"),
        ("group wire type", lambda: b"\x0b\x0c"),
        ("field number 0", lambda: b"\x02\x01x"),
        ("varint of 11 bytes", lambda: b"\x08" + b"\xff" * 10 + b"\x01"),
        ("unknown fields only", lambda: b"\xf8\xff\xff\xff\x0f\x01" + b"\xa2\x06\x03abc"),
        ("empty message", lambda: b""),
    ]
    if method.name == "CreateRun":
        kinds.append(("struct nested past the parser's limit", lambda: _deep_struct_bytes(rng.choice((40, 60, 200)))))
    label, make = rng.choice(kinds)
    return make(), label


# -- the generator ----------------------------------------------------------------------------


class RequestGenerator:
    """Case ``i`` of a campaign, made from the seed and ``i`` alone (see the module's docstring)."""

    def __init__(self, seed: int, tenants: Sequence[TenantPools], *, check_fraction: float = 0.3) -> None:
        if len(tenants) != 2:
            raise ValueError("the API fuzz part needs exactly two tenants")
        self.seed = seed
        self.tenants = tuple(tenants)
        self.check_fraction = check_fraction

    def case(self, index: int) -> Case:
        rng = random.Random(f"{self.seed}:{index}")
        method = METHODS[index % len(METHODS)]
        who = rng.randrange(2)
        own, other = self.tenants[who], self.tenants[1 - who]
        strategy = rng.choices([s for s, _ in STRATEGIES], weights=[w for _, w in STRATEGIES])[0]
        ctx = _Ctx(rng, index, own, other)
        bearer = (("authorization", f"Bearer {own.token}"),)
        # Every crossing mutation is checked; of the others, a seeded sample.
        sampled = rng.random() < self.check_fraction
        check = method.name in MUTATING and (sampled or strategy == "cross")
        case = Case(index, method, own.tenant, strategy, None, metadata=bearer, check_state=check)
        if strategy == "wire":
            case.raw, case.note = _wire(ctx, method)
            return case
        if strategy == "auth":
            case.request = _valid(ctx, method.name)
            case.tenant = ""
            case.metadata = rng.choice(
                (
                    (),
                    (("authorization", "Bearer "),),
                    (("authorization", "Bearer not-a-token-of-this-daemon"),),
                    (("authorization", f"Basic {own.token}"),),
                    (("authorization", own.token),),
                    (("authorization", f"Bearer {own.token[:-1]}"),),
                    (("authorization", "Bearer " + "t" * 4000),),
                    (("x-authorization", f"Bearer {own.token}"),),
                )
            )
            case.note = dict(case.metadata).get("authorization", "no authorization")[:24]
            return case
        if strategy == "cross":
            ctx.cross = True
            case.request = _valid(ctx, method.name)
            case.note = "names the other tenant's resources"
            return case
        if strategy in ("valid", "race"):
            case.request = _valid(ctx, method.name)
            if strategy == "race":
                case.copies = rng.choice((2, 3, 4))
                case.check_state = False  # concurrent by design
                case.note = f"{case.copies} at once"
            return case
        if strategy == "random":
            msg = message_class(method.input_type)()
            _fill_message(ctx, msg, hostile=True)
            case.request = msg
            case.fuzzed = ("*",)
            return case
        msg = _valid(ctx, method.name)
        paths = field_paths(method.input_type)
        if paths:
            chosen = rng.sample(paths, min(len(paths), rng.choice((1, 1, 2, 3))))
            for path in chosen:
                _mutate(ctx, msg, path)
            case.fuzzed = tuple(chosen)
        case.request = msg
        return case
