import datetime

from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_UNSPECIFIED: _ClassVar[State]
    PENDING: _ClassVar[State]
    RUNNING: _ClassVar[State]
    SUCCEEDED: _ClassVar[State]
    FAILED: _ClassVar[State]
    CANCELLED: _ClassVar[State]
    INTERRUPTED: _ClassVar[State]

class ClockMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLOCK_MODE_UNSPECIFIED: _ClassVar[ClockMode]
    HYBRID: _ClassVar[ClockMode]
    REALTIME: _ClassVar[ClockMode]
    DISCRETE: _ClassVar[ClockMode]
STATE_UNSPECIFIED: State
PENDING: State
RUNNING: State
SUCCEEDED: State
FAILED: State
CANCELLED: State
INTERRUPTED: State
CLOCK_MODE_UNSPECIFIED: ClockMode
HYBRID: ClockMode
REALTIME: ClockMode
DISCRETE: ClockMode

class BenchmarkSpec(_message.Message):
    __slots__ = ("name", "scenario", "data_dir", "subset", "options")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCENARIO_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    SUBSET_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    scenario: str
    data_dir: str
    subset: _containers.RepeatedScalarFieldContainer[str]
    options: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., scenario: _Optional[str] = ..., data_dir: _Optional[str] = ..., subset: _Optional[_Iterable[str]] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ModelEndpoint(_message.Message):
    __slots__ = ("base_url", "api", "model", "api_key_env", "skip_token_ids", "sampling_seed")
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    API_KEY_ENV_FIELD_NUMBER: _ClassVar[int]
    SKIP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_SEED_FIELD_NUMBER: _ClassVar[int]
    base_url: str
    api: str
    model: str
    api_key_env: str
    skip_token_ids: bool
    sampling_seed: int
    def __init__(self, base_url: _Optional[str] = ..., api: _Optional[str] = ..., model: _Optional[str] = ..., api_key_env: _Optional[str] = ..., skip_token_ids: _Optional[bool] = ..., sampling_seed: _Optional[int] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("memory_bytes", "cpus", "pids")
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    memory_bytes: int
    cpus: float
    pids: int
    def __init__(self, memory_bytes: _Optional[int] = ..., cpus: _Optional[float] = ..., pids: _Optional[int] = ...) -> None: ...

class AgentSpec(_message.Message):
    __slots__ = ("harness", "memory", "model", "resources", "options")
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    harness: str
    memory: str
    model: ModelEndpoint
    resources: Resources
    options: _struct_pb2.Struct
    def __init__(self, harness: _Optional[str] = ..., memory: _Optional[str] = ..., model: _Optional[_Union[ModelEndpoint, _Mapping]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ClockSpec(_message.Message):
    __slots__ = ("mode", "start_time", "rate")
    MODE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    mode: ClockMode
    start_time: _timestamp_pb2.Timestamp
    rate: float
    def __init__(self, mode: _Optional[_Union[ClockMode, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., rate: _Optional[float] = ...) -> None: ...

class RoundScore(_message.Message):
    __slots__ = ("round_id", "day", "kind", "graded", "score", "reason")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    DAY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    GRADED_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    day: str
    kind: str
    graded: bool
    score: float
    reason: str
    def __init__(self, round_id: _Optional[str] = ..., day: _Optional[str] = ..., kind: _Optional[str] = ..., graded: _Optional[bool] = ..., score: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class SchedulerStats(_message.Message):
    __slots__ = ("events_scheduled", "events_fired", "in_order", "delivery_delay_ms_p50", "delivery_delay_ms_max", "sim_span_s", "wall_s", "compression_ratio", "compression_limit", "jumps", "unfired", "deliveries", "deliveries_checked", "out_of_order", "early_deliveries", "negative_delays", "delivery_delay_ms_min", "receipt_vs_due_ms_min", "run_wall_s", "agent_s", "waiting_s", "overhead_s", "overhead_fraction", "compression_limit_agent", "compression_vs_agent_limit", "end_reason", "clock_mode")
    class OverheadSEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EVENTS_SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIRED_FIELD_NUMBER: _ClassVar[int]
    IN_ORDER_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_DELAY_MS_P50_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_DELAY_MS_MAX_FIELD_NUMBER: _ClassVar[int]
    SIM_SPAN_S_FIELD_NUMBER: _ClassVar[int]
    WALL_S_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_RATIO_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_LIMIT_FIELD_NUMBER: _ClassVar[int]
    JUMPS_FIELD_NUMBER: _ClassVar[int]
    UNFIRED_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_CHECKED_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_ORDER_FIELD_NUMBER: _ClassVar[int]
    EARLY_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_DELAYS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_DELAY_MS_MIN_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_VS_DUE_MS_MIN_FIELD_NUMBER: _ClassVar[int]
    RUN_WALL_S_FIELD_NUMBER: _ClassVar[int]
    AGENT_S_FIELD_NUMBER: _ClassVar[int]
    WAITING_S_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_S_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_FRACTION_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_LIMIT_AGENT_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_VS_AGENT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    END_REASON_FIELD_NUMBER: _ClassVar[int]
    CLOCK_MODE_FIELD_NUMBER: _ClassVar[int]
    events_scheduled: int
    events_fired: int
    in_order: bool
    delivery_delay_ms_p50: float
    delivery_delay_ms_max: float
    sim_span_s: float
    wall_s: float
    compression_ratio: float
    compression_limit: float
    jumps: int
    unfired: _containers.RepeatedScalarFieldContainer[str]
    deliveries: int
    deliveries_checked: int
    out_of_order: int
    early_deliveries: int
    negative_delays: int
    delivery_delay_ms_min: float
    receipt_vs_due_ms_min: float
    run_wall_s: float
    agent_s: float
    waiting_s: float
    overhead_s: _containers.ScalarMap[str, float]
    overhead_fraction: float
    compression_limit_agent: float
    compression_vs_agent_limit: float
    end_reason: str
    clock_mode: str
    def __init__(self, events_scheduled: _Optional[int] = ..., events_fired: _Optional[int] = ..., in_order: _Optional[bool] = ..., delivery_delay_ms_p50: _Optional[float] = ..., delivery_delay_ms_max: _Optional[float] = ..., sim_span_s: _Optional[float] = ..., wall_s: _Optional[float] = ..., compression_ratio: _Optional[float] = ..., compression_limit: _Optional[float] = ..., jumps: _Optional[int] = ..., unfired: _Optional[_Iterable[str]] = ..., deliveries: _Optional[int] = ..., deliveries_checked: _Optional[int] = ..., out_of_order: _Optional[int] = ..., early_deliveries: _Optional[int] = ..., negative_delays: _Optional[int] = ..., delivery_delay_ms_min: _Optional[float] = ..., receipt_vs_due_ms_min: _Optional[float] = ..., run_wall_s: _Optional[float] = ..., agent_s: _Optional[float] = ..., waiting_s: _Optional[float] = ..., overhead_s: _Optional[_Mapping[str, float]] = ..., overhead_fraction: _Optional[float] = ..., compression_limit_agent: _Optional[float] = ..., compression_vs_agent_limit: _Optional[float] = ..., end_reason: _Optional[str] = ..., clock_mode: _Optional[str] = ...) -> None: ...

class RoleUsage(_message.Message):
    __slots__ = ("role", "calls", "prompt_tokens", "completion_tokens", "failed", "failed_by_cause", "unleased")
    class FailedByCauseEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FAILED_BY_CAUSE_FIELD_NUMBER: _ClassVar[int]
    UNLEASED_FIELD_NUMBER: _ClassVar[int]
    role: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    failed: int
    failed_by_cause: _containers.ScalarMap[str, int]
    unleased: int
    def __init__(self, role: _Optional[str] = ..., calls: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., failed: _Optional[int] = ..., failed_by_cause: _Optional[_Mapping[str, int]] = ..., unleased: _Optional[int] = ...) -> None: ...

class CaptureStats(_message.Message):
    __slots__ = ("calls", "calls_failed", "failed_by_cause", "calls_unleased", "calls_lost", "calls_recovered_at_close", "drain", "prompt_tokens", "completion_tokens")
    class FailedByCauseEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CALLS_FAILED_FIELD_NUMBER: _ClassVar[int]
    FAILED_BY_CAUSE_FIELD_NUMBER: _ClassVar[int]
    CALLS_UNLEASED_FIELD_NUMBER: _ClassVar[int]
    CALLS_LOST_FIELD_NUMBER: _ClassVar[int]
    CALLS_RECOVERED_AT_CLOSE_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    calls: int
    calls_failed: int
    failed_by_cause: _containers.ScalarMap[str, int]
    calls_unleased: int
    calls_lost: int
    calls_recovered_at_close: int
    drain: str
    prompt_tokens: int
    completion_tokens: int
    def __init__(self, calls: _Optional[int] = ..., calls_failed: _Optional[int] = ..., failed_by_cause: _Optional[_Mapping[str, int]] = ..., calls_unleased: _Optional[int] = ..., calls_lost: _Optional[int] = ..., calls_recovered_at_close: _Optional[int] = ..., drain: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ...) -> None: ...

class JudgeInfo(_message.Message):
    __slots__ = ("endpoint", "model", "embedded", "note")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EMBEDDED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    model: str
    embedded: bool
    note: str
    def __init__(self, endpoint: _Optional[str] = ..., model: _Optional[str] = ..., embedded: _Optional[bool] = ..., note: _Optional[str] = ...) -> None: ...

class RunResults(_message.Message):
    __slots__ = ("score", "rounds", "rounds_graded", "round_scores", "scheduler", "calls", "report_path", "plot_path", "capture", "judges", "warnings", "harness", "components", "memory_token_share")
    SCORE_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_GRADED_FIELD_NUMBER: _ClassVar[int]
    ROUND_SCORES_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    REPORT_PATH_FIELD_NUMBER: _ClassVar[int]
    PLOT_PATH_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_FIELD_NUMBER: _ClassVar[int]
    JUDGES_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOKEN_SHARE_FIELD_NUMBER: _ClassVar[int]
    score: float
    rounds: int
    rounds_graded: int
    round_scores: _containers.RepeatedCompositeFieldContainer[RoundScore]
    scheduler: SchedulerStats
    calls: _containers.RepeatedCompositeFieldContainer[RoleUsage]
    report_path: str
    plot_path: str
    capture: CaptureStats
    judges: _containers.RepeatedCompositeFieldContainer[JudgeInfo]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    harness: HarnessProcess
    components: _containers.RepeatedCompositeFieldContainer[RoleUsage]
    memory_token_share: float
    def __init__(self, score: _Optional[float] = ..., rounds: _Optional[int] = ..., rounds_graded: _Optional[int] = ..., round_scores: _Optional[_Iterable[_Union[RoundScore, _Mapping]]] = ..., scheduler: _Optional[_Union[SchedulerStats, _Mapping]] = ..., calls: _Optional[_Iterable[_Union[RoleUsage, _Mapping]]] = ..., report_path: _Optional[str] = ..., plot_path: _Optional[str] = ..., capture: _Optional[_Union[CaptureStats, _Mapping]] = ..., judges: _Optional[_Iterable[_Union[JudgeInfo, _Mapping]]] = ..., warnings: _Optional[_Iterable[str]] = ..., harness: _Optional[_Union[HarnessProcess, _Mapping]] = ..., components: _Optional[_Iterable[_Union[RoleUsage, _Mapping]]] = ..., memory_token_share: _Optional[float] = ...) -> None: ...

class HarnessProcess(_message.Message):
    __slots__ = ("name", "version", "process_clock", "executable", "linked", "probed_clock")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROCESS_CLOCK_FIELD_NUMBER: _ClassVar[int]
    EXECUTABLE_FIELD_NUMBER: _ClassVar[int]
    LINKED_FIELD_NUMBER: _ClassVar[int]
    PROBED_CLOCK_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    process_clock: str
    executable: str
    linked: str
    probed_clock: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., process_clock: _Optional[str] = ..., executable: _Optional[str] = ..., linked: _Optional[str] = ..., probed_clock: _Optional[str] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("name", "benchmark", "agent", "clock", "labels", "state", "state_reason", "create_time", "start_time", "end_time", "sim_time", "last_event_seq", "results", "parent", "group", "group_index", "history_expire_time", "history_expired", "node")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    SIM_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    GROUP_INDEX_FIELD_NUMBER: _ClassVar[int]
    HISTORY_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    HISTORY_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    name: str
    benchmark: BenchmarkSpec
    agent: AgentSpec
    clock: ClockSpec
    labels: _containers.ScalarMap[str, str]
    state: State
    state_reason: str
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    sim_time: _timestamp_pb2.Timestamp
    last_event_seq: int
    results: RunResults
    parent: str
    group: str
    group_index: int
    history_expire_time: _timestamp_pb2.Timestamp
    history_expired: bool
    node: str
    def __init__(self, name: _Optional[str] = ..., benchmark: _Optional[_Union[BenchmarkSpec, _Mapping]] = ..., agent: _Optional[_Union[AgentSpec, _Mapping]] = ..., clock: _Optional[_Union[ClockSpec, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., state: _Optional[_Union[State, str]] = ..., state_reason: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., sim_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_event_seq: _Optional[int] = ..., results: _Optional[_Union[RunResults, _Mapping]] = ..., parent: _Optional[str] = ..., group: _Optional[str] = ..., group_index: _Optional[int] = ..., history_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., history_expired: _Optional[bool] = ..., node: _Optional[str] = ...) -> None: ...

class CreateRunRequest(_message.Message):
    __slots__ = ("run", "run_id", "request_id")
    RUN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    run: Run
    run_id: str
    request_id: str
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., run_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "filter")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    filter: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., filter: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteRunRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeRunRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("name", "after_seq")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    name: str
    after_seq: int
    def __init__(self, name: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class FireEvent(_message.Message):
    __slots__ = ("event_id", "source", "due_time", "priority", "snapshot_version", "effects")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    EFFECTS_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    source: str
    due_time: _timestamp_pb2.Timestamp
    priority: int
    snapshot_version: int
    effects: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, event_id: _Optional[str] = ..., source: _Optional[str] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., priority: _Optional[int] = ..., snapshot_version: _Optional[int] = ..., effects: _Optional[_Iterable[str]] = ...) -> None: ...

class ClockJumpEvent(_message.Message):
    __slots__ = ("from_time", "to_time")
    FROM_TIME_FIELD_NUMBER: _ClassVar[int]
    TO_TIME_FIELD_NUMBER: _ClassVar[int]
    from_time: _timestamp_pb2.Timestamp
    to_time: _timestamp_pb2.Timestamp
    def __init__(self, from_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., to_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LeaseEvent(_message.Message):
    __slots__ = ("change", "lease", "holder", "held_count")
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    HELD_COUNT_FIELD_NUMBER: _ClassVar[int]
    change: str
    lease: str
    holder: str
    held_count: int
    def __init__(self, change: _Optional[str] = ..., lease: _Optional[str] = ..., holder: _Optional[str] = ..., held_count: _Optional[int] = ...) -> None: ...

class AgentTurnEvent(_message.Message):
    __slots__ = ("round_id", "session", "phase", "reply", "delivery_delay_ms", "harness_error", "memory")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    HARNESS_ERROR_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    session: str
    phase: str
    reply: str
    delivery_delay_ms: float
    harness_error: str
    memory: MemoryTurn
    def __init__(self, round_id: _Optional[str] = ..., session: _Optional[str] = ..., phase: _Optional[str] = ..., reply: _Optional[str] = ..., delivery_delay_ms: _Optional[float] = ..., harness_error: _Optional[str] = ..., memory: _Optional[_Union[MemoryTurn, _Mapping]] = ...) -> None: ...

class MemoryTurn(_message.Message):
    __slots__ = ("system", "recalled", "recall_ms", "stored", "store_ms", "error")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    RECALLED_FIELD_NUMBER: _ClassVar[int]
    RECALL_MS_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    STORE_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    system: str
    recalled: _containers.RepeatedScalarFieldContainer[str]
    recall_ms: float
    stored: int
    store_ms: float
    error: str
    def __init__(self, system: _Optional[str] = ..., recalled: _Optional[_Iterable[str]] = ..., recall_ms: _Optional[float] = ..., stored: _Optional[int] = ..., store_ms: _Optional[float] = ..., error: _Optional[str] = ...) -> None: ...

class VerdictEvent(_message.Message):
    __slots__ = ("round_id", "graded", "score", "reason")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    GRADED_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    graded: bool
    score: float
    reason: str
    def __init__(self, round_id: _Optional[str] = ..., graded: _Optional[bool] = ..., score: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class StateChangeEvent(_message.Message):
    __slots__ = ("state", "reason")
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    state: State
    reason: str
    def __init__(self, state: _Optional[_Union[State, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("seq", "run", "sim_time", "wall_time", "fire", "jump", "lease", "turn", "verdict", "state")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    SIM_TIME_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRE_FIELD_NUMBER: _ClassVar[int]
    JUMP_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    run: str
    sim_time: _timestamp_pb2.Timestamp
    wall_time: _timestamp_pb2.Timestamp
    fire: FireEvent
    jump: ClockJumpEvent
    lease: LeaseEvent
    turn: AgentTurnEvent
    verdict: VerdictEvent
    state: StateChangeEvent
    def __init__(self, seq: _Optional[int] = ..., run: _Optional[str] = ..., sim_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., wall_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fire: _Optional[_Union[FireEvent, _Mapping]] = ..., jump: _Optional[_Union[ClockJumpEvent, _Mapping]] = ..., lease: _Optional[_Union[LeaseEvent, _Mapping]] = ..., turn: _Optional[_Union[AgentTurnEvent, _Mapping]] = ..., verdict: _Optional[_Union[VerdictEvent, _Mapping]] = ..., state: _Optional[_Union[StateChangeEvent, _Mapping]] = ...) -> None: ...

class Benchmark(_message.Message):
    __slots__ = ("name", "description", "data_format", "scenarios")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DATA_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SCENARIOS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    data_format: str
    scenarios: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., data_format: _Optional[str] = ..., scenarios: _Optional[_Iterable[str]] = ...) -> None: ...

class ListBenchmarksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBenchmarksResponse(_message.Message):
    __slots__ = ("benchmarks",)
    BENCHMARKS_FIELD_NUMBER: _ClassVar[int]
    benchmarks: _containers.RepeatedCompositeFieldContainer[Benchmark]
    def __init__(self, benchmarks: _Optional[_Iterable[_Union[Benchmark, _Mapping]]] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("name", "description", "sandboxed", "memory_systems", "version", "wire_apis", "capabilities", "image", "process_clock")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SANDBOXED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SYSTEMS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WIRE_APIS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    PROCESS_CLOCK_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    sandboxed: bool
    memory_systems: _containers.RepeatedScalarFieldContainer[str]
    version: str
    wire_apis: _containers.RepeatedScalarFieldContainer[str]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    image: str
    process_clock: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., sandboxed: _Optional[bool] = ..., memory_systems: _Optional[_Iterable[str]] = ..., version: _Optional[str] = ..., wire_apis: _Optional[_Iterable[str]] = ..., capabilities: _Optional[_Iterable[str]] = ..., image: _Optional[str] = ..., process_clock: _Optional[str] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("name", "sim_time", "create_time", "journal_length", "image", "session_saved")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIM_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_LENGTH_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    SESSION_SAVED_FIELD_NUMBER: _ClassVar[int]
    name: str
    sim_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    journal_length: int
    image: str
    session_saved: bool
    def __init__(self, name: _Optional[str] = ..., sim_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., journal_length: _Optional[int] = ..., image: _Optional[str] = ..., session_saved: _Optional[bool] = ...) -> None: ...

class SaveSnapshotRequest(_message.Message):
    __slots__ = ("run", "snapshot_id", "at_turn_boundary")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    AT_TURN_BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    run: str
    snapshot_id: str
    at_turn_boundary: bool
    def __init__(self, run: _Optional[str] = ..., snapshot_id: _Optional[str] = ..., at_turn_boundary: _Optional[bool] = ...) -> None: ...

class RestoreSnapshotRequest(_message.Message):
    __slots__ = ("snapshot", "new_run_id", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    NEW_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    snapshot: str
    new_run_id: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, snapshot: _Optional[str] = ..., new_run_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class BranchRunRequest(_message.Message):
    __slots__ = ("snapshot", "count", "group_id", "labels", "sampling_seeds", "request_id")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_SEEDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot: str
    count: int
    group_id: str
    labels: _containers.ScalarMap[str, str]
    sampling_seeds: _containers.RepeatedScalarFieldContainer[int]
    request_id: str
    def __init__(self, snapshot: _Optional[str] = ..., count: _Optional[int] = ..., group_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., sampling_seeds: _Optional[_Iterable[int]] = ..., request_id: _Optional[str] = ...) -> None: ...

class BranchRunResponse(_message.Message):
    __slots__ = ("group", "runs")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    group: str
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, group: _Optional[str] = ..., runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class WatchGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: str
    def __init__(self, run: _Optional[str] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[Snapshot]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[Snapshot, _Mapping]]] = ...) -> None: ...

class StreamTrajectoriesRequest(_message.Message):
    __slots__ = ("run", "trainable_roles", "roles", "reward_mode")
    RUN_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_ROLES_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    REWARD_MODE_FIELD_NUMBER: _ClassVar[int]
    run: str
    trainable_roles: _containers.RepeatedScalarFieldContainer[str]
    roles: _containers.RepeatedScalarFieldContainer[str]
    reward_mode: str
    def __init__(self, run: _Optional[str] = ..., trainable_roles: _Optional[_Iterable[str]] = ..., roles: _Optional[_Iterable[str]] = ..., reward_mode: _Optional[str] = ...) -> None: ...

class Trajectory(_message.Message):
    __slots__ = ("trajectory_id", "run", "role", "prompt_token_ids", "response_ids", "loss_mask", "rollout_logprobs", "reward", "branch_reason", "thread", "call_ids", "stop_reason")
    TRAJECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_IDS_FIELD_NUMBER: _ClassVar[int]
    LOSS_MASK_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    BRANCH_REASON_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    trajectory_id: str
    run: str
    role: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    response_ids: _containers.RepeatedScalarFieldContainer[int]
    loss_mask: _containers.RepeatedScalarFieldContainer[int]
    rollout_logprobs: _containers.RepeatedScalarFieldContainer[float]
    reward: float
    branch_reason: str
    thread: str
    call_ids: _containers.RepeatedScalarFieldContainer[str]
    stop_reason: str
    def __init__(self, trajectory_id: _Optional[str] = ..., run: _Optional[str] = ..., role: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., response_ids: _Optional[_Iterable[int]] = ..., loss_mask: _Optional[_Iterable[int]] = ..., rollout_logprobs: _Optional[_Iterable[float]] = ..., reward: _Optional[float] = ..., branch_reason: _Optional[str] = ..., thread: _Optional[str] = ..., call_ids: _Optional[_Iterable[str]] = ..., stop_reason: _Optional[str] = ...) -> None: ...

class ExportTrajectoriesRequest(_message.Message):
    __slots__ = ("run", "format", "trainable_roles", "roles", "reward_mode", "group", "unrewarded")
    RUN_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_ROLES_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    REWARD_MODE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    UNREWARDED_FIELD_NUMBER: _ClassVar[int]
    run: str
    format: str
    trainable_roles: _containers.RepeatedScalarFieldContainer[str]
    roles: _containers.RepeatedScalarFieldContainer[str]
    reward_mode: str
    group: str
    unrewarded: str
    def __init__(self, run: _Optional[str] = ..., format: _Optional[str] = ..., trainable_roles: _Optional[_Iterable[str]] = ..., roles: _Optional[_Iterable[str]] = ..., reward_mode: _Optional[str] = ..., group: _Optional[str] = ..., unrewarded: _Optional[str] = ...) -> None: ...

class LeftOutSample(_message.Message):
    __slots__ = ("sample_id", "reason", "run")
    SAMPLE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    sample_id: str
    reason: str
    run: str
    def __init__(self, sample_id: _Optional[str] = ..., reason: _Optional[str] = ..., run: _Optional[str] = ...) -> None: ...

class ExportChunk(_message.Message):
    __slots__ = ("data", "rows", "left_out")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    LEFT_OUT_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    rows: int
    left_out: _containers.RepeatedCompositeFieldContainer[LeftOutSample]
    def __init__(self, data: _Optional[bytes] = ..., rows: _Optional[int] = ..., left_out: _Optional[_Iterable[_Union[LeftOutSample, _Mapping]]] = ...) -> None: ...
