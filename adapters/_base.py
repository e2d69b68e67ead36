"""The adapter interfaces: benchmarks, agents, and the harness contract.

A benchmark adapter turns upstream task data (unchanged) into event sources on
simulated time and grades what the agent did. An agent is what a run talks
to (:class:`AgentAdapter`): sessions, message delivery, turn-end detection,
state save/restore, the harness's own routines (crons, consolidation) as event
sources, and the facets it declares (a workspace, jobs, files that snapshots
keep). Benchmarks and agents never call each other; the run wires both to one
scheduler.

Unmodified harnesses (the reference harness, OpenClaw, Hermes, Claude Code,
Codex) implement :class:`SandboxHarness` and declare themselves with a
:class:`HarnessDeclaration`: their image, the wire APIs they speak, how they
are pointed at the capture proxy per role, where their state lives, their
capabilities. The substrate gives them a :class:`SandboxAccess` (commands in
the sandbox, the proxy's endpoints) and turns them into an agent; nothing of
the sandbox's wiring is theirs to write. See docs/architecture.md, "How to add
a harness".
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from sclated.scheduler import DeliverPrompt, EventSource, EventSpec, Grade, Notify, WorldEvent

__all__ = [
    "AgentAdapter",
    "AgentEnvironment",
    "AgentFiles",
    "BenchmarkAdapter",
    "BenchmarkInfo",
    "Capability",
    "ExecOutput",
    "GradeContext",
    "HarnessDeclaration",
    "InProcessAgent",
    "Jobs",
    "Judge",
    "JudgeReply",
    "LineChannel",
    "ProcessClock",
    "ProxyEndpoints",
    "RoundInfo",
    "RunClock",
    "SandboxAccess",
    "SandboxHarness",
    "Scenario",
    "ScenarioConfig",
    "SeededSessions",
    "SessionSeed",
    "TaskContainer",
    "TaskContainers",
    "TaskEnvironment",
    "ToolReply",
    "TurnResult",
    "Verdict",
    "WireApi",
    "Workspace",
    "World",
    "WorldChange",
    "missing_capabilities",
]


@dataclass(frozen=True, slots=True)
class BenchmarkInfo:
    name: str
    description: str
    data_format: str
    """Which upstream layout ``data_dir`` must have."""
    builtin_scenarios: tuple[str, ...] = ()
    path_options: frozenset[str] = frozenset()
    """Options whose value is a path on the daemon's host (absolute). The daemon confines
    them, and ``data_dir``, to the data roots it gives the run's tenant before ``load``
    sees them: an adapter reads a path option only if it is declared here."""
    data_file_options: frozenset[str] = frozenset()
    """Options naming a file inside ``data_dir`` (or inside the built-in scenario's folder
    when there is none): a relative path without ``..``, or an absolute path confined
    like a path option."""
    builtin_data: tuple[Path, ...] = ()
    """The folders of the adapter's own scenarios: every tenant may read them."""


@dataclass(frozen=True, slots=True)
class ScenarioConfig:
    data_dir: Path | None = None
    """Upstream-layout data; None means the adapter's own built-in scenario."""
    scenario: str | None = None
    """A built-in scenario name, when ``data_dir`` is None."""
    subset: tuple[str, ...] = ()
    """Upstream ids to keep (days, question ids); empty keeps all."""
    options: Mapping[str, Any] = field(default_factory=dict)
    agent_capabilities: frozenset[Capability] = frozenset()
    """What the run's agent declares: a benchmark may follow its upstream protocol
    more closely for an agent that can (MetaClaw's seeded sessions for OpenClaw)."""


@dataclass(frozen=True, slots=True)
class RoundInfo:
    """One gradable unit (a MetaClaw round, a LongMemEval question)."""

    round_id: str
    day: str
    kind: str
    gradable: bool = True
    why_ungradable: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    round_id: str
    score: float | None
    """None when ungradable; otherwise in [0, 1]."""
    graded: bool
    reason: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What one delivered message produced, once the harness's turn ended."""

    reply: str
    started_ns: int
    ended_ns: int
    received_wall_ns: int
    """Monotonic wall time at which the harness received the message (delivery delay);
    the host's and a container's monotonic clocks are the same kernel clock."""
    details: Mapping[str, Any] = field(default_factory=dict)
    received_sim_ns: int | None = None
    """The simulated time the harness itself read from its own clock when the message
    arrived (inside a sandbox: libfaketime's). None for an agent without a clock of its
    own; then the delivery cannot be checked for order and earliness."""
    received_seq: int | None = None
    """The harness's own count of messages received (per harness process)."""


@dataclass(frozen=True, slots=True)
class JudgeReply:
    """What the judge model said, and who the judge was (recorded with each verdict)."""

    text: str
    endpoint: str
    """The judge's base URL, or "embedded" for the daemon's embedded model."""
    model: str
    embedded: bool
    """True when the daemon's small embedded model judged: such scores are not
    comparable with published ones."""

    def details(self) -> dict[str, Any]:
        return {"judge_endpoint": self.endpoint, "judge_model": self.model, "judge_embedded": self.embedded}


class Judge(Protocol):
    """The run's judge model (see sclated.runs._judge): one prompt, one reply that says
    who judged. ``max_tokens``: None for the judge's own default (LongMemEval's 10)."""

    def __call__(self, prompt: str, *, max_tokens: int | None = None) -> Awaitable[JudgeReply]: ...


class GradeContext(Protocol):
    """What grading may use: the agent's workspace and replies, a judge model."""

    async def exec_in_workspace(self, command: str, *, timeout_s: float = 120.0) -> tuple[int, str]: ...

    async def export_from_workspace(self, src: str, dest: Path) -> None:
        """Copy a directory of the agent's filesystem to ``dest`` on the host (see Workspace.export)."""
        ...

    def reply_for(self, round_id: str) -> str | None: ...

    async def judge(self, prompt: str) -> JudgeReply:
        """Ask the run's judge model (see sclated.runs._judge; the embedded one by default)."""
        ...


@dataclass(frozen=True, slots=True)
class WorldChange:
    """What one step of a benchmark's world changed."""

    state: Mapping[str, Any] = field(default_factory=dict)
    """For the scheduler's snapshot (``When`` triggers read it); journaled as a world input."""
    deliveries: tuple[DeliverPrompt | Notify, ...] = ()
    """What the agent is now told (a user's message, an app's notification): each becomes
    an event of the run at the step's time, so the journal keeps it."""


@dataclass(frozen=True, slots=True)
class ToolReply:
    """The answer to one of the agent's tool calls on the world."""

    result: Any
    error: str | None
    """A refused or failing call: a tool error for the agent, never a failure of the run."""
    change: WorldChange


class World(Protocol):
    """A benchmark's live world on the daemon's host (Gaia2's apps).

    The run opens it before it builds its scheduler (``sources`` may depend on
    what opening learnt), executes every :class:`WorldEvent` fire on it in
    journal order, and closes it when the run ends. Everything it changes is
    a function of the fires it was given, so a resumed run rebuilds it by
    applying the journal's world fires again.
    """

    async def open(self, run_dir: Path | None, judge: Judge | None) -> None:
        """``judge``: the run's judge model, for checks of the world that need one."""
        ...

    async def apply(self, effect: WorldEvent, *, due_ns: int, fired_ns: int) -> WorldChange:
        """Execute one world event, due at ``due_ns`` (its scheduled time, which the world
        records) and run at ``fired_ns`` (what the world's clock reads)."""
        ...

    async def tools(self) -> list[dict[str, Any]]:
        """The agent's tools on the world (name, app, function, description, args)."""
        ...

    async def agent_call(self, app: str, function: str, args: Mapping[str, Any], at_ns: int) -> ToolReply:
        """One tool call of the agent, at ``at_ns``: checked, executed, recorded as its action."""
        ...

    def wait_for(self, app: str, function: str, args: Mapping[str, Any]) -> float | None:
        """If this call is the agent waiting for something to happen (Gaia2's
        ``SystemApp.wait_for_notification``), how long at most, in simulated seconds
        (0: until the next event); None for any other call. The run then waits in
        simulated time, so the clock jumps, instead of the world moving its own clock."""
        ...

    async def agent_reply(self, text: str, at_ns: int) -> WorldChange:
        """The agent ended a turn with ``text`` (Gaia2: its answer to the user, unless it
        already sent one through the tools)."""
        ...

    async def close(self) -> None: ...


class TaskContainer(Protocol):
    """One container from a benchmark's own image (a SWE-bench instance's environment):
    no network, nothing of the agent's; removed by ``close`` (and with its run)."""

    async def exec(self, argv: Sequence[str], *, timeout_s: float = 1800.0) -> ExecOutput:
        """Run a command; its whole output (stdout then stderr), not a tail. A command past
        ``timeout_s`` is killed and reported with exit code 124 (coreutils ``timeout``)."""
        ...

    async def put_file(self, path: str, data: bytes, *, mode: int = 0o644) -> None: ...

    async def copy_out(self, path: str, dest: Path) -> None:
        """Copy a directory of the container into ``dest`` on the host (made; must not exist)."""
        ...

    async def close(self) -> None: ...


class TaskContainers(Protocol):
    """Containers of a benchmark's own images, beside the agent's sandbox, for one run.

    Images are local: an image that is not on the engine is never pulled. A benchmark
    builds what it can build offline with ``build_image`` (a Dockerfile on one of the
    daemon's own image recipes).
    """

    async def image_exists(self, ref: str) -> bool: ...

    async def image_label(self, ref: str, key: str) -> str | None:
        """A label of a local image (None: no such label, or no such image)."""
        ...

    async def build_image(
        self, ref: str, dockerfile: str, *, base_recipe: str, labels: Mapping[str, str] | None = None
    ) -> None:
        """Build ``ref`` from ``dockerfile`` (which starts ``ARG BASE_IMAGE`` / ``FROM
        ${BASE_IMAGE}``) on the daemon's image recipe ``base_recipe``, built first if missing."""
        ...

    async def open(self, image: str, *, purpose: str) -> TaskContainer:
        """Start a container of ``image`` (its ``purpose`` goes into the container's name)."""
        ...


class TaskEnvironment(Protocol):
    """What a benchmark must have ready outside the agent before its events run (SWE-bench's
    instance images and the repositories the agent works on). The run opens it before it
    builds the scheduler, again after a daemon restart (so ``open`` is idempotent), and
    closes it when the run ends."""

    async def open(self, run_dir: Path | None, containers: TaskContainers) -> None: ...

    async def close(self) -> None: ...


class Scenario(Protocol):
    """A loaded benchmark scenario, ready to be put on a scheduler."""

    @property
    def world(self) -> World | None:
        """The scenario's live world, if it has one (None: every effect is the agent's)."""
        ...

    @property
    def environment(self) -> TaskEnvironment | None:
        """What the scenario prepares outside the agent (None: nothing)."""
        ...

    @property
    def name(self) -> str: ...

    @property
    def start_ns(self) -> int: ...

    @property
    def rounds(self) -> Sequence[RoundInfo]: ...

    def sources(self) -> Sequence[EventSource]: ...

    def workspace_seed(self) -> Path | None:
        """A directory copied into the agent's workspace before the first session."""
        ...

    @property
    def requires(self) -> Mapping[Capability, str]:
        """What the scenario needs of the agent, each with why (the run refuses an agent that lacks one)."""
        ...

    async def grade(self, effect: Grade, ctx: GradeContext) -> Verdict: ...


class BenchmarkAdapter(Protocol):
    @property
    def info(self) -> BenchmarkInfo: ...

    def load(self, config: ScenarioConfig) -> Scenario: ...


class Capability(enum.Enum):
    """What an agent can do beyond sessions and messages (declared, never probed)."""

    WORKSPACE = "workspace"
    """Commands and files in the agent's workspace (file checks, seeding a day's files)."""
    JOBS = "jobs"
    """The harness's own jobs (crons, heartbeats) run as scheduler events, and commands
    run as the harness's background work (attributed to the memory role)."""
    CONSOLIDATE = "consolidate"
    """Memory consolidation when a benchmark asks for it."""
    FILE_SNAPSHOTS = "file_snapshots"
    """Its files (sandbox, memory) are kept by snapshots and branches."""
    SESSION_STATE = "session_state"
    """In-process session state is saved and restored with snapshots."""
    WAIT = "wait"
    """It can wait in simulated time (``sclate-wait``) instead of sleeping in real time."""
    SEEDED_SESSIONS = "seeded_sessions"
    """A benchmark's recorded session transcript becomes a session's history without any
    model call (OpenClaw's session files, as MetaClaw-Bench seeds them upstream)."""


def missing_capabilities(needed: Mapping[Capability, str], has: frozenset[Capability]) -> list[str]:
    """Why an agent cannot run a scenario: one line per capability it lacks (empty: it can)."""
    return [f"{cap.value} ({why})" for cap, why in needed.items() if cap not in has]


# -- what a run gives an agent ------------------------------------------------------------


class RunClock(Protocol):
    """The run's simulated clock as an agent sees it."""

    @property
    def mode_name(self) -> str:
        """``hybrid``, ``realtime`` or ``discrete``."""
        ...

    @property
    def rate(self) -> float: ...

    def now(self) -> int: ...

    def add_publisher(self, publisher: Callable[[int], Awaitable[None]]) -> None:
        """Awaited with the new time after every jump, before events at that time are dispatched."""
        ...

    def remove_publisher(self, publisher: Callable[[int], Awaitable[None]]) -> None: ...


@dataclass(frozen=True, slots=True)
class AgentEnvironment:
    """What the run worker hands an agent before its first session (``prepare``)."""

    run_key: str
    """``tenant/run``: unique in the daemon."""
    tenant: str
    run_id: str
    run_dir: Path | None
    """The run's files on the daemon's host (None for a run outside a daemon)."""
    clock: RunClock
    leases: Any
    """The run's lease table (sclated.clock.LeaseTable): model calls hold leases."""
    wait: Callable[[int], Awaitable[int]]
    """Wait until a simulated time (``sclate-wait``): the current turn, if any, is
    suspended meanwhile so the clock can jump; returns the time it woke at."""
    model_base_url: str
    """Empty: the daemon's embedded model."""
    model_api: str
    model_name: str
    resources: Any
    """sclated.runs.Resources: memory, CPUs, processes."""
    workspace_seed: Path | None
    resume: bool
    """The run continues after a daemon restart (an existing sandbox is adopted)."""
    fail_run: Callable[[str], None]
    """End the run FAILED with this reason (the substrate broke under the agent)."""
    restore_from: Path | None = None
    """A snapshot directory the agent starts from (its ``sandbox/`` part)."""
    schedule: Callable[[Sequence[EventSpec]], None] | None = None
    """Put work the agent scheduled itself (a harness's cron job, read from its own
    state) on the run's scheduler. Journaled like any input, so a replay after a
    crash and a branch see the same events; an id already known is skipped, and a
    time already past is moved to now. None outside a run."""
    model_api_key_env: str = ""
    """The NAME of the daemon's environment variable holding the endpoint's key ("": none)."""
    model_skip_token_ids: bool = False
    """The endpoint refuses token-id request fields: the capture asks for none."""
    model_sampling_seed: int | None = None
    """Each model call samples with a seed derived from this and its request (a branch
    group's runs each have their own); None: the endpoint's own sampling."""
    world: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]] | None = None
    """The scenario's world (Gaia2's apps) for the sandbox's ``are`` command: a request
    ``{"op": "tools"}`` or ``{"op": "call", "app", "function", "args"}``. None: the
    scenario has no world."""


# -- the facets an agent may declare ----------------------------------------------------


class Workspace(Protocol):
    """The agent's working files: commands there (grading) and files put there (seeding)."""

    async def exec(self, command: str, *, timeout_s: float = 120.0) -> tuple[int, str]:
        """Run a shell command in the workspace; (exit code, output tail)."""
        ...

    async def seed(self, src: Path, dest: str) -> None:
        """Copy a host directory's contents to ``dest`` in the agent's filesystem."""
        ...

    async def clear(self) -> None:
        """Empty the workspace for a fresh start (a benchmark's new day), keeping only
        the harness's own memory files there (``HarnessDeclaration.workspace_memory``)."""
        ...

    async def export(self, src: str, dest: Path) -> None:
        """Copy a directory of the agent's filesystem (``src``, absolute) into ``dest`` on
        the host (made; must not exist): what grading reads whole (a repository to diff)."""
        ...


@dataclass(frozen=True, slots=True)
class SessionSeed:
    """A session to continue from a recorded transcript (a benchmark's seeded history)."""

    session_id: str
    """The harness's own session id (the transcript's, as upstream names it)."""
    agent: str
    """The harness's agent id the session belongs to."""
    transcript: Path | None
    """The transcript on the daemon's host, in the harness's own format; None: an empty session."""
    harness_config: Path | None = None
    """The benchmark's config for the harness (OpenClaw's ``openclaw.json``), on the host:
    its agents and tool policy are kept, its model endpoints replaced by the capture proxy."""


class SeededSessions(Protocol):
    """Sessions that start from a recorded history (``Capability.SEEDED_SESSIONS``)."""

    async def seed_session(self, seed: SessionSeed) -> None:
        """Make ``seed`` the history of its session before the next message to it."""
        ...


class Jobs(Protocol):
    """The harness's own background work, run when the scheduler says."""

    async def run_job(self, command: str, *, holder: str, timeout_s: float) -> tuple[int, str]: ...

    async def consolidate(self) -> None:
        """Consolidate memory now (a benchmark asked); a no-op when the harness's crons do it."""
        ...


class AgentFiles(Protocol):
    """The agent's files as snapshots keep them (its sandbox, memory and workspace)."""

    async def snapshot(self, dest: Path, *, on_paused: Callable[[], Awaitable[None]] | None = None) -> dict[str, Any]:
        """Freeze the agent, save its files into ``dest``; returns what a restore needs (JSON)."""
        ...

    async def check_restorable(self, snapshot_dir: Path) -> None:
        """NotFound unless the agent can start from ``snapshot_dir``."""
        ...

    async def discard(self, saved: Mapping[str, Any]) -> None:
        """Remove what ``snapshot`` made (a snapshot that could not be recorded or was deleted)."""
        ...


class AgentAdapter(Protocol):
    """What a run talks to: one agent (a sandboxed harness, or an in-process agent)."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> frozenset[Capability]: ...

    @property
    def workspace(self) -> Workspace | None:
        """Set exactly when ``Capability.WORKSPACE`` is declared."""
        ...

    @property
    def jobs(self) -> Jobs | None:
        """Set exactly when ``Capability.JOBS`` is declared."""
        ...

    @property
    def files(self) -> AgentFiles | None:
        """Set exactly when ``Capability.FILE_SNAPSHOTS`` is declared."""
        ...

    @property
    def sessions(self) -> SeededSessions | None:
        """Set exactly when ``Capability.SEEDED_SESSIONS`` is declared."""
        ...

    async def prepare(self, env: AgentEnvironment) -> None:
        """Get ready before the first session (start the sandbox); a no-op for in-process agents."""
        ...

    async def close(self, *, keep: bool = False) -> None:
        """Release everything; ``keep``: leave the sandbox for a resumed run to adopt (daemon shutdown)."""
        ...

    async def start_session(self, session: str) -> None: ...

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        """Deliver a message and return when the harness's turn has ended."""
        ...

    async def stop_session(self) -> None: ...

    async def save_state(self, dest: Path) -> None: ...

    async def restore_state(self, src: Path) -> None: ...

    def routines(self) -> Sequence[EventSource]:
        """The harness's own crons and consolidation jobs, as event sources."""
        ...

    def capture_report(self) -> Mapping[str, Any] | None:
        """How its model calls' records were handed over when it closed (None: no capture proxy)."""
        ...

    def process_report(self) -> Mapping[str, Any] | None:
        """The harness process: name, version, the clock it is declared to read and what the
        sandbox's start probe found (None for an agent inside the daemon)."""
        ...


class InProcessAgent:
    """Defaults for an agent that runs inside the daemon (no sandbox, no capture proxy).

    Subclasses implement ``name``, ``start_session``, ``deliver`` and
    ``stop_session``; they declare more by overriding ``capabilities`` (and
    the facet that goes with a capability).
    """

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset()

    @property
    def workspace(self) -> Workspace | None:
        return None

    @property
    def jobs(self) -> Jobs | None:
        return None

    @property
    def files(self) -> AgentFiles | None:
        return None

    @property
    def sessions(self) -> SeededSessions | None:
        return None

    async def prepare(self, env: AgentEnvironment) -> None:
        return None

    async def close(self, *, keep: bool = False) -> None:
        return None

    async def save_state(self, dest: Path) -> None:
        return None

    async def restore_state(self, src: Path) -> None:
        return None

    def routines(self) -> Sequence[EventSource]:
        return ()

    def capture_report(self) -> Mapping[str, Any] | None:
        return None

    def process_report(self) -> Mapping[str, Any] | None:
        return None


# -- the harness contract -----------------------------------------------------------------

WireApi = str
"""``openai_chat``, ``openai_responses`` or ``anthropic_messages``."""

ProcessClock = Literal["simulated", "wall"]

ROLE_MODEL_PREFIX = "sclate-role-"
"""Model names ``sclate-role-<role>`` attribute a call to a role (see ProxyEndpoints.role_model);
kept equal to proxy_addons._attribution.ROLE_MODEL_PREFIX (a test checks)."""


@dataclass(frozen=True, slots=True)
class ProxyEndpoints:
    """Where a sandboxed harness's model calls go: the capture proxy's listener per role.

    Each is a base URL on the sandbox's loopback (``http://127.0.0.1:4001``);
    a call is attributed to the role of the listener it arrived on.
    ``api_key`` is the run's secret key (the proxy puts the real one on).
    """

    agent: str
    memory: str
    aux: str
    api_key: str
    model: str
    """The model name to ask for (what the run's endpoint serves)."""
    openai_prefix: str = "/v1"
    """The path an OpenAI-style client puts after the base URL (``OPENAI_BASE_URL``)."""
    memory_system: str = ""
    """The memory role's listener for the run's memory system (Mem0, Hindsight), apart
    from ``memory`` (the harness's own memory work) so their calls are told apart;
    empty: the same as ``memory``."""

    @property
    def memory_system_url(self) -> str:
        return self.memory_system or self.memory

    @staticmethod
    def role_model(role: str) -> str:
        """A model name that attributes a call to ``role`` whatever listener it arrives on.

        For a harness with one endpoint and several model tiers (Claude Code's small
        background model): the capture proxy takes a call asking for this name as
        ``role``'s and forwards it asking for the run's model instead.
        """
        return f"{ROLE_MODEL_PREFIX}{role}"

    def as_role(self, role: str) -> ProxyEndpoints:
        """The same endpoints with every call going to ``role``'s listener (a memory job)."""
        url = {"agent": self.agent, "memory": self.memory, "aux": self.aux}[role]
        return ProxyEndpoints(url, url, url, self.api_key, self.model, self.openai_prefix, self.memory_system)


@dataclass(frozen=True, slots=True)
class ExecOutput:
    exit_code: int
    output: str
    """stdout then stderr, decoded, the tail only."""


class LineChannel(Protocol):
    """A process inside the sandbox spoken to line by line (its stdin and stdout)."""

    async def send(self, line: str) -> None: ...

    async def readline(self) -> str:
        """The next line; "" once the process ended."""
        ...

    async def close(self) -> None: ...


class SandboxAccess(Protocol):
    """What the substrate gives a harness inside its sandbox."""

    @property
    def endpoints(self) -> ProxyEndpoints: ...

    async def exec(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 120.0
    ) -> ExecOutput: ...

    async def open_channel(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> LineChannel:
        """Start a long-lived process (the harness itself) with its stdin/stdout attached."""
        ...

    def schedule(self, specs: Sequence[EventSpec]) -> None:
        """Put the harness's own due work on the run's scheduler (see ``AgentEnvironment.schedule``)."""
        ...


@dataclass(frozen=True, slots=True)
class HarnessDeclaration:
    """Everything the substrate must know about a harness, declared once."""

    name: str
    description: str
    image: str
    """The image recipe its sandbox runs (registered with sclated.runtime)."""
    wire_apis: frozenset[WireApi]
    """The model APIs it speaks (the endpoint it is pointed at must serve one)."""
    capabilities: frozenset[Capability]
    """Beyond WORKSPACE, JOBS and FILE_SNAPSHOTS, which every sandbox gives."""
    state_dirs: tuple[str, ...] = ("/workspace", "/memory")
    """Its session state and memory files: what snapshots and branches keep."""
    options: frozenset[str] = frozenset()
    """The run options it accepts (validated by ``SandboxHarness`` construction)."""
    path_options: frozenset[str] = frozenset()
    """Those of ``options`` that are paths on the daemon's host: the daemon confines them
    to the tenant's data roots (see ``BenchmarkInfo.path_options``). None today."""
    memory_systems: tuple[str, ...] = ("native",)
    workspace_memory: tuple[str, ...] = ()
    """Names in ``/workspace`` that are the harness's own memory (OpenClaw's ``MEMORY.md``
    and ``memory/``): a benchmark's fresh workspace for a new day keeps them, so what the
    agent learned carries over while the day's files start clean."""
    version: str = ""
    """The harness's own version (its pinned package; the project's for the reference harness)."""
    executable: str = ""
    """The harness's own program in its image (a name on PATH or a path): the sandbox's start
    probe checks which clock it reads (see ``process_clock``)."""
    process_clock: ProcessClock = "simulated"
    """Which clock the harness process itself reads: ``simulated`` (libfaketime reaches it: a
    dynamically linked program) or ``wall`` (a static executable, which ``LD_PRELOAD`` cannot
    reach; the commands it runs still see simulated time). Shown by ``sclate agents list`` and
    recorded with every run of the harness."""


class SandboxHarness(Protocol):
    """One run's unmodified harness inside its sandbox (implemented per harness).

    Configuration, environment variables and the proxy are the only levers:
    ``environment`` points every process of the harness at the capture proxy;
    ``start`` starts the harness once the sandbox is up (fresh, adopted after a
    daemon restart, or restored from a snapshot).
    """

    declaration: HarnessDeclaration

    def environment(self, endpoints: ProxyEndpoints) -> Mapping[str, str]:
        """Environment variables that point the harness at ``endpoints`` (per role)."""
        ...

    async def start(self, sandbox: SandboxAccess) -> None: ...

    async def stop(self) -> None:
        """End the harness's processes (the sandbox is closed after)."""
        ...

    async def start_session(self, session: str) -> None: ...

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        """Deliver a message; return when the turn ended (the harness's own end-of-turn signal)."""
        ...

    async def stop_session(self) -> None: ...

    async def seed_session(self, seed: SessionSeed) -> None:
        """Make a recorded transcript a session's history (``Capability.SEEDED_SESSIONS``);
        a harness that does not declare it is never asked."""
        ...

    async def save_state(self, dest: Path) -> None:
        """Its in-process session state (``Capability.SESSION_STATE``); files are kept with the sandbox."""
        ...

    async def restore_state(self, src: Path) -> None: ...

    def routines(self) -> Sequence[EventSource]:
        """Its own crons and heartbeats as scheduler events (run through the one-shot commands)."""
        ...

    def consolidate_command(self) -> str | None:
        """A command that consolidates memory now; None when its crons already do it."""
        ...

    async def job_ended(self, command: str, result: ExecOutput) -> None:
        """One of its jobs ran (a cron tick it scheduled): a harness that keeps its own
        schedule reads it again here and schedules what comes due next."""
        ...
