"""What a run is: benchmark, agent, clock and labels, validated once.

The API layer converts its messages into a :class:`RunSpec`; everything below
it works with these frozen values and their JSON form (stored in SQLite).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sclated.clock import ClockMode
from sclated.errors import InvalidArgument

__all__ = [
    "AgentRef",
    "BenchmarkRef",
    "ClockRef",
    "ModelRef",
    "Resources",
    "RunSpec",
    "validate_run_id",
    "validate_tenant",
]

_RUN_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_TENANT = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_LABEL_KEY = re.compile(r"^[a-z]([a-z0-9_.-]{0,62})$")
MAX_LABELS = 64
MAX_LABEL_VALUE = 256
MAX_TEXT = 4096
MAX_SUBSET = 10_000


def validate_run_id(run_id: str, field_name: str = "run_id") -> str:
    if not _RUN_ID.match(run_id):
        raise InvalidArgument(
            f"{field_name} {run_id!r} must be 1-63 characters of lowercase letters, digits and '-', "
            "starting with a letter and not ending with '-'",
            field=field_name,
        )
    return run_id


def validate_tenant(tenant: str) -> str:
    if not _TENANT.match(tenant):
        raise InvalidArgument(f"tenant {tenant!r} must be 1-64 of [A-Za-z0-9._-]", field="tenant")
    return tenant


def _text(value: Any, field_name: str, *, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{field_name} must be a string", field=field_name)
    if len(value) > limit:
        raise InvalidArgument(f"{field_name} is longer than {limit} characters", field=field_name)
    return value


def _options(value: Any, field_name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{field_name} must be an object", field=field_name)
    return dict(value)


@dataclass(frozen=True, slots=True)
class BenchmarkRef:
    name: str
    scenario: str = ""
    data_dir: str = ""
    subset: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelRef:
    base_url: str = ""
    """Empty: the daemon's embedded model."""
    api: str = "openai"
    model: str = ""
    api_key_env: str = ""
    """The NAME of the daemon's environment variable holding the endpoint's key."""
    skip_token_ids: bool = False
    """The endpoint refuses token-id request fields (a hosted API)."""
    sampling_seed: int | None = None
    """Each call samples with a seed derived from this and its request (None: the endpoint's own)."""


@dataclass(frozen=True, slots=True)
class Resources:
    memory_bytes: int = 0
    cpus: float = 0.0
    pids: int = 0


@dataclass(frozen=True, slots=True)
class AgentRef:
    harness: str
    memory: str = ""
    model: ModelRef = field(default_factory=ModelRef)
    resources: Resources = field(default_factory=Resources)
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClockRef:
    mode: ClockMode = ClockMode.HYBRID
    start_ns: int | None = None
    rate: float = 1.0


@dataclass(frozen=True, slots=True)
class RunSpec:
    benchmark: BenchmarkRef
    agent: AgentRef
    clock: ClockRef = field(default_factory=ClockRef)
    labels: Mapping[str, str] = field(default_factory=dict)
    group: str = ""
    """The branch group this run belongs to (``BranchRun``); set by the daemon, never by a request."""
    group_index: int = 0
    group_snapshot: str = ""
    """The snapshot the group branched from (``runs/{run}/snapshots/{id}``)."""

    def to_dict(self) -> dict[str, Any]:
        b, a, c = self.benchmark, self.agent, self.clock
        return {
            "benchmark": {
                "name": b.name,
                "scenario": b.scenario,
                "data_dir": b.data_dir,
                "subset": list(b.subset),
                "options": dict(b.options),
            },
            "agent": {
                "harness": a.harness,
                "memory": a.memory,
                "model": {
                    "base_url": a.model.base_url,
                    "api": a.model.api,
                    "model": a.model.model,
                    "api_key_env": a.model.api_key_env,
                    "skip_token_ids": a.model.skip_token_ids,
                    "sampling_seed": a.model.sampling_seed,
                },
                "resources": {
                    "memory_bytes": a.resources.memory_bytes,
                    "cpus": a.resources.cpus,
                    "pids": a.resources.pids,
                },
                "options": dict(a.options),
            },
            "clock": {"mode": c.mode.value, "start_ns": c.start_ns, "rate": c.rate},
            "labels": dict(self.labels),
            **(
                {"group": {"id": self.group, "index": self.group_index, "snapshot": self.group_snapshot}}
                if self.group
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunSpec:
        """Parse and validate; every error names the field, as the API would."""
        if not isinstance(d, Mapping):
            raise InvalidArgument("run must be an object", field="run")
        b = d.get("benchmark") or {}
        a = d.get("agent") or {}
        c = d.get("clock") or {}
        if not isinstance(b, Mapping) or not isinstance(a, Mapping) or not isinstance(c, Mapping):
            raise InvalidArgument("run.benchmark, run.agent and run.clock must be objects", field="run")
        name = _text(b.get("name", ""), "run.benchmark.name", limit=128)
        if not name:
            raise InvalidArgument("run.benchmark.name is required", field="run.benchmark.name")
        harness = _text(a.get("harness", ""), "run.agent.harness", limit=128)
        if not harness:
            raise InvalidArgument("run.agent.harness is required", field="run.agent.harness")
        subset = b.get("subset") or []
        if not isinstance(subset, list | tuple) or not all(isinstance(s, str) for s in subset):
            raise InvalidArgument("run.benchmark.subset must be a list of strings", field="run.benchmark.subset")
        if len(subset) > MAX_SUBSET:
            raise InvalidArgument(
                f"run.benchmark.subset has more than {MAX_SUBSET} entries",
                field="run.benchmark.subset",
            )
        m = a.get("model") or {}
        api = _text(m.get("api", "") or "openai", "run.agent.model.api", limit=32)
        if api not in ("openai", "anthropic"):
            raise InvalidArgument(
                f"run.agent.model.api must be 'openai' or 'anthropic', got {api!r}",
                field="run.agent.model.api",
            )
        base_url = _text(m.get("base_url", ""), "run.agent.model.base_url")
        if base_url and not re.match(r"^https?://[^\s/]+", base_url):
            raise InvalidArgument(
                f"run.agent.model.base_url {base_url!r} is not an http(s) URL",
                field="run.agent.model.base_url",
            )
        key_env = _text(m.get("api_key_env", ""), "run.agent.model.api_key_env", limit=128)
        if key_env and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key_env):
            raise InvalidArgument(
                f"run.agent.model.api_key_env {key_env!r} is not an environment variable name "
                "(give the NAME of the daemon's variable that holds the key, not the key)",
                field="run.agent.model.api_key_env",
            )
        if key_env and not base_url:
            raise InvalidArgument(
                "run.agent.model.api_key_env needs run.agent.model.base_url (the embedded model takes no key)",
                field="run.agent.model.api_key_env",
            )
        skip_token_ids = m.get("skip_token_ids", False)
        if not isinstance(skip_token_ids, bool):
            raise InvalidArgument(
                "run.agent.model.skip_token_ids must be true or false", field="run.agent.model.skip_token_ids"
            )
        seed = m.get("sampling_seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63):
            raise InvalidArgument(
                f"run.agent.model.sampling_seed must be an integer in [0, 2^63), got {seed!r}",
                field="run.agent.model.sampling_seed",
            )
        group_raw = d.get("group") or {}
        if not isinstance(group_raw, Mapping):
            raise InvalidArgument("run.group must be an object", field="run.group")
        group = _text(group_raw.get("id", ""), "run.group.id", limit=64)
        group_index = group_raw.get("index", 0)
        if not isinstance(group_index, int) or isinstance(group_index, bool) or group_index < 0:
            raise InvalidArgument("run.group.index must be a non-negative integer", field="run.group.index")
        r = a.get("resources") or {}
        resources = Resources(
            memory_bytes=_nonneg_int(r.get("memory_bytes", 0), "run.agent.resources.memory_bytes"),
            cpus=_nonneg_float(r.get("cpus", 0.0), "run.agent.resources.cpus"),
            pids=_nonneg_int(r.get("pids", 0), "run.agent.resources.pids"),
        )
        mode_raw = c.get("mode") or "hybrid"
        try:
            mode = ClockMode(str(mode_raw).lower())
        except ValueError:
            raise InvalidArgument(
                f"run.clock.mode must be hybrid, realtime or discrete, got {mode_raw!r}",
                field="run.clock.mode",
            ) from None
        start_ns = c.get("start_ns")
        if start_ns is not None and (not isinstance(start_ns, int) or start_ns < 0):
            raise InvalidArgument("run.clock.start_time must not be before 1970", field="run.clock.start_time")
        rate = c.get("rate") or 1.0
        if not isinstance(rate, int | float) or not 0 < rate <= 1e6:
            raise InvalidArgument(f"run.clock.rate must be in (0, 1e6], got {rate!r}", field="run.clock.rate")
        if mode is not ClockMode.REALTIME and rate != 1.0:
            raise InvalidArgument("run.clock.rate applies to REALTIME clocks only", field="run.clock.rate")
        labels = d.get("labels") or {}
        if not isinstance(labels, Mapping):
            raise InvalidArgument("run.labels must be a map", field="run.labels")
        if len(labels) > MAX_LABELS:
            raise InvalidArgument(f"run.labels has more than {MAX_LABELS} entries", field="run.labels")
        for k, v in labels.items():
            if not isinstance(k, str) or not _LABEL_KEY.match(k):
                raise InvalidArgument(
                    f"label key {k!r} must be lowercase letters, digits, '_', '.', '-' starting with a letter",
                    field=f"run.labels.{k}",
                )
            _text(v, f"run.labels.{k}", limit=MAX_LABEL_VALUE)
        return cls(
            benchmark=BenchmarkRef(
                name=name,
                scenario=_text(b.get("scenario", ""), "run.benchmark.scenario", limit=128),
                data_dir=_text(b.get("data_dir", ""), "run.benchmark.data_dir"),
                subset=tuple(subset),
                options=_options(b.get("options"), "run.benchmark.options"),
            ),
            agent=AgentRef(
                harness=harness,
                memory=_text(a.get("memory", ""), "run.agent.memory", limit=128),
                model=ModelRef(
                    base_url=base_url,
                    api=api,
                    model=_text(m.get("model", ""), "run.agent.model.model", limit=256),
                    api_key_env=key_env,
                    skip_token_ids=skip_token_ids,
                    sampling_seed=seed,
                ),
                resources=resources,
                options=_options(a.get("options"), "run.agent.options"),
            ),
            clock=ClockRef(mode=mode, start_ns=start_ns, rate=float(rate)),
            labels=dict(labels),
            group=group,
            group_index=group_index,
            group_snapshot=_text(group_raw.get("snapshot", ""), "run.group.snapshot", limit=512),
        )


def _nonneg_int(v: Any, field_name: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise InvalidArgument(f"{field_name} must be a non-negative integer", field=field_name)
    return v


def _nonneg_float(v: Any, field_name: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool) or v < 0:
        raise InvalidArgument(f"{field_name} must be a non-negative number", field=field_name)
    return float(v)
