import * as fs from "node:fs";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import type { ProtoGrpcType } from "./generated/sclate";
import type { AgentSpec as AgentSpecMsg } from "./generated/sclate/v1/AgentSpec";
import type { AgentSpec__Output } from "./generated/sclate/v1/AgentSpec";
import type { BenchmarkSpec as BenchmarkSpecMsg } from "./generated/sclate/v1/BenchmarkSpec";
import type { BenchmarkSpec__Output } from "./generated/sclate/v1/BenchmarkSpec";
import type { CreateRunRequest } from "./generated/sclate/v1/CreateRunRequest";
import type { Run__Output } from "./generated/sclate/v1/Run";
import type { RunEvent__Output } from "./generated/sclate/v1/RunEvent";
import type { SclateClient as SclateStub } from "./generated/sclate/v1/Sclate";
import type { CancelRunRequest } from "./generated/sclate/v1/CancelRunRequest";
import type { DeleteRunRequest } from "./generated/sclate/v1/DeleteRunRequest";
import type { Empty__Output } from "./generated/google/protobuf/Empty";
import type { GetRunRequest } from "./generated/sclate/v1/GetRunRequest";
import type { ListAgentsRequest } from "./generated/sclate/v1/ListAgentsRequest";
import type { ListAgentsResponse__Output } from "./generated/sclate/v1/ListAgentsResponse";
import type { ListBenchmarksRequest } from "./generated/sclate/v1/ListBenchmarksRequest";
import type { ListBenchmarksResponse__Output } from "./generated/sclate/v1/ListBenchmarksResponse";
import type { ListRunsRequest } from "./generated/sclate/v1/ListRunsRequest";
import type { ListRunsResponse__Output } from "./generated/sclate/v1/ListRunsResponse";
import type { ResumeRunRequest } from "./generated/sclate/v1/ResumeRunRequest";
import { toSclateError } from "./errors";
import { fromStruct, toStruct } from "./struct";
import type {
  Agent,
  AgentSpec,
  Benchmark,
  BenchmarkSpec,
  CreateRunInput,
  ListRunsOptions,
  ListRunsPage,
  Run,
  RunEvent,
} from "./types";

/** Options for the loader; they must match the `gen` script in package.json. */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
};

export const PROTO_FILE = "sclate/v1/sclate.proto";

export interface SclateClientOptions {
  /** `host:port` (TCP) or `unix:/path/to/socket`. */
  endpoint: string;
  /** Bearer token sent as `authorization: Bearer <token>` on every call. */
  token?: string;
  /** Deadline of unary calls in ms (default 30000; Infinity for none). Streams have none. */
  deadlineMs?: number;
  /** Channel credentials; default insecure (loopback / unix socket). */
  credentials?: grpc.ChannelCredentials;
  channelOptions?: grpc.ChannelOptions;
  /** Directory holding `sclate/v1/sclate.proto`; default `<package>/../../protos`. */
  protoDir?: string;
}

/** Per-call options. */
export interface CallOptions {
  /** Cancels the call; the promise (or iteration) then rejects with `signal.reason`. */
  signal?: AbortSignal;
  /** Overrides the client's deadline for this call (ms; Infinity for none). */
  deadlineMs?: number;
}

/** Finds the root of this package (the folder of its package.json). */
function packageRoot(): string {
  let dir = __dirname;
  for (;;) {
    const pj = path.join(dir, "package.json");
    if (fs.existsSync(pj)) {
      const { name } = JSON.parse(fs.readFileSync(pj, "utf8")) as { name?: unknown };
      if (name === "@sclate/client") return dir;
    }
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`package.json of @sclate/client not found above ${__dirname}`);
    dir = up;
  }
}

/** The repository's `protos/` directory, found relative to this package. */
export function defaultProtoDir(): string {
  return path.resolve(packageRoot(), "..", "..", "protos");
}

const loaded = new Map<string, ProtoGrpcType>();

function loadProto(protoDir: string): ProtoGrpcType {
  let proto = loaded.get(protoDir);
  if (!proto) {
    const file = path.join(protoDir, PROTO_FILE);
    if (!fs.existsSync(file)) throw new Error(`sclate API definition not found: ${file}`);
    const def = protoLoader.loadSync(PROTO_FILE, { ...LOADER_OPTIONS, includeDirs: [protoDir] });
    // The shape is what proto-loader-gen-types generated from the same file.
    proto = grpc.loadPackageDefinition(def) as unknown as ProtoGrpcType;
    loaded.set(protoDir, proto);
  }
  return proto;
}

/** Accepts `runs/x` or a bare `x`. */
export function runName(nameOrId: string): string {
  if (!nameOrId) throw new TypeError("a run name is required");
  return nameOrId.startsWith("runs/") ? nameOrId : `runs/${nameOrId}`;
}

type Invoke<Req, Res> = (
  req: Req,
  md: grpc.Metadata,
  opts: grpc.CallOptions,
  cb: grpc.requestCallback<Res>,
) => grpc.ClientUnaryCall;

/** A typed client for the sclate.v1 API of sclated. */
export class SclateClient {
  readonly endpoint: string;
  private readonly stub: SclateStub;
  private readonly token: string | undefined;
  private readonly deadlineMs: number;

  constructor(options: SclateClientOptions) {
    if (!options.endpoint) throw new TypeError("endpoint is required (host:port or unix:/path)");
    this.endpoint = options.endpoint;
    this.token = options.token;
    this.deadlineMs = options.deadlineMs ?? 30_000;
    const proto = loadProto(options.protoDir ?? defaultProtoDir());
    this.stub = new proto.sclate.v1.Sclate(
      options.endpoint,
      options.credentials ?? grpc.credentials.createInsecure(),
      options.channelOptions ?? {},
    );
  }

  /** Closes the channel; calls in flight are cancelled. */
  close(): void {
    this.stub.close();
  }

  async createRun(input: CreateRunInput, opts: CallOptions = {}): Promise<Run> {
    const req = toCreateRunRequest(input);
    const run = await this.unary<CreateRunRequest, Run__Output>(
      "CreateRun", (r, m, o, cb) => this.stub.CreateRun(r, m, o, cb), req, opts);
    return toRun(run);
  }

  async getRun(name: string, opts: CallOptions = {}): Promise<Run> {
    const run = await this.unary<GetRunRequest, Run__Output>(
      "GetRun", (r, m, o, cb) => this.stub.GetRun(r, m, o, cb), { name: runName(name) }, opts);
    return toRun(run);
  }

  /** One page of runs. */
  async listRuns(options: ListRunsOptions = {}, opts: CallOptions = {}): Promise<ListRunsPage> {
    const res = await this.unary<ListRunsRequest, ListRunsResponse__Output>(
      "ListRuns",
      (r, m, o, cb) => this.stub.ListRuns(r, m, o, cb),
      { pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? "", filter: options.filter ?? "" },
      opts,
    );
    return { runs: res.runs.map(toRun), nextPageToken: res.nextPageToken };
  }

  /** Every run matching the filter, fetching pages as it goes. */
  async *listAllRuns(
    options: Omit<ListRunsOptions, "pageToken"> = {},
    opts: CallOptions = {},
  ): AsyncGenerator<Run, void, undefined> {
    let pageToken = "";
    do {
      const page = await this.listRuns({ ...options, pageToken }, opts);
      yield* page.runs;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  async cancelRun(name: string, opts: CallOptions = {}): Promise<Run> {
    const run = await this.unary<CancelRunRequest, Run__Output>(
      "CancelRun", (r, m, o, cb) => this.stub.CancelRun(r, m, o, cb), { name: runName(name) }, opts);
    return toRun(run);
  }

  async deleteRun(name: string, opts: CallOptions = {}): Promise<void> {
    await this.unary<DeleteRunRequest, Empty__Output>(
      "DeleteRun", (r, m, o, cb) => this.stub.DeleteRun(r, m, o, cb), { name: runName(name) }, opts);
  }

  async resumeRun(name: string, opts: CallOptions = {}): Promise<Run> {
    const run = await this.unary<ResumeRunRequest, Run__Output>(
      "ResumeRun", (r, m, o, cb) => this.stub.ResumeRun(r, m, o, cb), { name: runName(name) }, opts);
    return toRun(run);
  }

  async listBenchmarks(opts: CallOptions = {}): Promise<Benchmark[]> {
    const res = await this.unary<ListBenchmarksRequest, ListBenchmarksResponse__Output>(
      "ListBenchmarks", (r, m, o, cb) => this.stub.ListBenchmarks(r, m, o, cb), {}, opts);
    return res.benchmarks;
  }

  async listAgents(opts: CallOptions = {}): Promise<Agent[]> {
    const res = await this.unary<ListAgentsRequest, ListAgentsResponse__Output>(
      "ListAgents", (r, m, o, cb) => this.stub.ListAgents(r, m, o, cb), {}, opts);
    return res.agents;
  }

  /**
   * The run's events with seq > afterSeq, in order: first the recorded ones,
   * then live ones; the iteration ends after the run's final state change.
   * To resume after an interruption, call again with the last seq seen.
   * Leaving the loop early (break/return/throw) cancels the stream.
   */
  async *watchRun(name: string, afterSeq = 0, opts: CallOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
    const { signal } = opts;
    signal?.throwIfAborted();
    if (!Number.isSafeInteger(afterSeq) || afterSeq < 0) {
      throw new RangeError(`afterSeq must be a non-negative integer, got ${afterSeq}`);
    }
    const call = this.stub.WatchRun(
      { name: runName(name), afterSeq },
      this.metadata(),
      this.callOptions(opts.deadlineMs ?? Infinity),
    );
    const onAbort = (): void => call.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const raw of call as AsyncIterable<RunEvent__Output>) {
        signal?.throwIfAborted();
        yield toRunEvent(raw);
      }
      signal?.throwIfAborted();
    } catch (e) {
      if (signal?.aborted) throw signal.reason;
      throw toSclateError("WatchRun", e);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      call.cancel();
    }
  }

  private metadata(): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.token !== undefined) md.set("authorization", `Bearer ${this.token}`);
    return md;
  }

  private callOptions(deadlineMs: number): grpc.CallOptions {
    return Number.isFinite(deadlineMs) ? { deadline: Date.now() + deadlineMs } : {};
  }

  private unary<Req, Res>(method: string, invoke: Invoke<Req, Res>, req: Req, opts: CallOptions): Promise<Res> {
    const { signal } = opts;
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<Res>((resolve, reject) => {
      let call: grpc.ClientUnaryCall | undefined;
      const onAbort = (): void => call?.cancel();
      signal?.addEventListener("abort", onAbort, { once: true });
      call = invoke(req, this.metadata(), this.callOptions(opts.deadlineMs ?? this.deadlineMs), (err, res) => {
        signal?.removeEventListener("abort", onAbort);
        if (err) reject(signal?.aborted ? signal.reason : toSclateError(method, err));
        else if (res === undefined) reject(new Error(`${method}: the server sent no response message`));
        else resolve(res);
      });
    });
  }
}

export function toCreateRunRequest(input: CreateRunInput): CreateRunRequest {
  const b = input.benchmark;
  const a = input.agent;
  const benchmark: BenchmarkSpecMsg = {
    name: b.name,
    scenario: b.scenario ?? "",
    dataDir: b.dataDir ?? "",
    subset: b.subset ?? [],
    options: b.options ? toStruct(b.options, "benchmark.options") : null,
  };
  const agent: AgentSpecMsg = {
    harness: a.harness,
    memory: a.memory ?? "",
    model: a.model ?? null,
    resources: a.resources ?? null,
    options: a.options ? toStruct(a.options, "agent.options") : null,
  };
  return {
    run: { benchmark, agent, clock: input.clock ?? null, labels: input.labels ?? {} },
    runId: input.runId ?? "",
    requestId: input.requestId ?? "",
  };
}

function toBenchmarkSpec(b: BenchmarkSpec__Output | null): BenchmarkSpec | null {
  return b && { ...b, options: b.options ? fromStruct(b.options) : {} };
}

function toAgentSpec(a: AgentSpec__Output | null): AgentSpec | null {
  return a && { ...a, options: a.options ? fromStruct(a.options) : {} };
}

export function toRun(r: Run__Output): Run {
  return { ...r, benchmark: toBenchmarkSpec(r.benchmark), agent: toAgentSpec(r.agent) };
}

export function toRunEvent(e: RunEvent__Output): RunEvent {
  const base = { seq: e.seq, run: e.run, simTime: e.simTime, wallTime: e.wallTime };
  switch (e.kind) {
    case "fire":
      if (e.fire) return { ...base, kind: "fire", fire: e.fire };
      break;
    case "jump":
      if (e.jump) return { ...base, kind: "jump", jump: e.jump };
      break;
    case "lease":
      if (e.lease) return { ...base, kind: "lease", lease: e.lease };
      break;
    case "turn":
      if (e.turn) return { ...base, kind: "turn", turn: e.turn };
      break;
    case "verdict":
      if (e.verdict) return { ...base, kind: "verdict", verdict: e.verdict };
      break;
    case "state":
      if (e.state) return { ...base, kind: "state", state: e.state };
      break;
    case undefined:
      break;
  }
  return { ...base, kind: "unknown" };
}
