// Public types of the client. Messages are the shapes @grpc/proto-loader
// decodes (camelCase fields, enums as strings, int64 as number, unset
// messages as null), generated from sclate.proto by proto-loader-gen-types,
// with two conveniences: google.protobuf.Struct fields are plain JSON
// objects, and RunEvent is a union discriminated by `kind`.
import type { Timestamp__Output } from "./generated/google/protobuf/Timestamp";
import type { AgentSpec__Output } from "./generated/sclate/v1/AgentSpec";
import type { AgentTurnEvent__Output } from "./generated/sclate/v1/AgentTurnEvent";
import type { BenchmarkSpec__Output } from "./generated/sclate/v1/BenchmarkSpec";
import type { ClockJumpEvent__Output } from "./generated/sclate/v1/ClockJumpEvent";
import type { ClockSpec } from "./generated/sclate/v1/ClockSpec";
import type { FireEvent__Output } from "./generated/sclate/v1/FireEvent";
import type { LeaseEvent__Output } from "./generated/sclate/v1/LeaseEvent";
import type { ModelEndpoint } from "./generated/sclate/v1/ModelEndpoint";
import type { Resources } from "./generated/sclate/v1/Resources";
import type { Run__Output } from "./generated/sclate/v1/Run";
import type { State__Output } from "./generated/sclate/v1/State";
import type { StateChangeEvent__Output } from "./generated/sclate/v1/StateChangeEvent";
import type { VerdictEvent__Output } from "./generated/sclate/v1/VerdictEvent";
import type { JsonObject } from "./struct";

export type { Agent__Output as Agent } from "./generated/sclate/v1/Agent";
export type { Benchmark__Output as Benchmark } from "./generated/sclate/v1/Benchmark";
export type { ClockMode__Output as ClockMode } from "./generated/sclate/v1/ClockMode";
export type { ClockSpec__Output } from "./generated/sclate/v1/ClockSpec";
export type { RunResults__Output as RunResults } from "./generated/sclate/v1/RunResults";
export type { RoundScore__Output as RoundScore } from "./generated/sclate/v1/RoundScore";
export type { SchedulerStats__Output as SchedulerStats } from "./generated/sclate/v1/SchedulerStats";
export type { RoleUsage__Output as RoleUsage } from "./generated/sclate/v1/RoleUsage";
export type {
  Timestamp__Output as Timestamp,
  FireEvent__Output as FireEvent,
  ClockJumpEvent__Output as ClockJumpEvent,
  LeaseEvent__Output as LeaseEvent,
  AgentTurnEvent__Output as AgentTurnEvent,
  VerdictEvent__Output as VerdictEvent,
  StateChangeEvent__Output as StateChangeEvent,
};

/** A run state: "PENDING", "RUNNING", "SUCCEEDED", ... */
export type State = State__Output;

/** States a run never leaves on its own. */
export const TERMINAL_STATES: ReadonlySet<State> = new Set<State>([
  "SUCCEEDED",
  "FAILED",
  "CANCELLED",
  "INTERRUPTED",
]);

export function isTerminal(state: State): boolean {
  return TERMINAL_STATES.has(state);
}

export type BenchmarkSpec = Omit<BenchmarkSpec__Output, "options"> & { options: JsonObject };
export type AgentSpec = Omit<AgentSpec__Output, "options"> & { options: JsonObject };

/** A run as returned by the daemon. */
export type Run = Omit<Run__Output, "benchmark" | "agent"> & {
  benchmark: BenchmarkSpec | null;
  agent: AgentSpec | null;
};

export interface BenchmarkSpecInput {
  /** A name from listBenchmarks(), e.g. "synthetic". */
  name: string;
  scenario?: string;
  dataDir?: string;
  subset?: string[];
  options?: JsonObject;
}

export interface AgentSpecInput {
  /** A name from listAgents(), e.g. "scripted". */
  harness: string;
  memory?: string;
  model?: ModelEndpoint;
  resources?: Resources;
  options?: JsonObject;
}

export interface CreateRunInput {
  benchmark: BenchmarkSpecInput;
  agent: AgentSpecInput;
  clock?: ClockSpec;
  labels?: Record<string, string>;
  /** Optional final component of the name (`runs/{runId}`). */
  runId?: string;
  /** Idempotency key: repeating a request with the same key returns the same run. */
  requestId?: string;
}

export interface ListRunsOptions {
  pageSize?: number;
  pageToken?: string;
  /** e.g. `state=RUNNING AND labels.team=a` */
  filter?: string;
}

export interface ListRunsPage {
  runs: Run[];
  /** Empty on the last page. */
  nextPageToken: string;
}

interface RunEventBase {
  seq: number;
  run: string;
  simTime: Timestamp__Output | null;
  wallTime: Timestamp__Output | null;
}

/** One event of a run, discriminated by `kind`. */
export type RunEvent = RunEventBase &
  (
    | { kind: "fire"; fire: FireEvent__Output }
    | { kind: "jump"; jump: ClockJumpEvent__Output }
    | { kind: "lease"; lease: LeaseEvent__Output }
    | { kind: "turn"; turn: AgentTurnEvent__Output }
    | { kind: "verdict"; verdict: VerdictEvent__Output }
    | { kind: "state"; state: StateChangeEvent__Output }
    /** A kind this client's copy of the proto does not know. */
    | { kind: "unknown" }
  );

export type RunEventKind = RunEvent["kind"];

/** A Timestamp as a Date (millisecond precision), or null when unset. */
export function toDate(ts: Timestamp__Output | null | undefined): Date | null {
  if (!ts) return null;
  return new Date(ts.seconds * 1000 + Math.floor(ts.nanos / 1e6));
}
