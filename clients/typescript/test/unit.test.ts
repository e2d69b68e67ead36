// Pure conversions of the client (no daemon).
import * as assert from "node:assert/strict";
import { test } from "node:test";

import { Metadata, SclateError, defaultProtoDir, formatEvent, runName, status, toStruct, type JsonObject } from "../src";
import * as protoLoader from "@grpc/proto-loader";

import { LOADER_OPTIONS, PROTO_FILE, toCreateRunRequest, toRun, toRunEvent } from "../src/client";
import type { CreateRunRequest__Output } from "../src/generated/sclate/v1/CreateRunRequest";

test("options round-trip through the wire as google.protobuf.Struct", () => {
  const options: JsonObject = { days: 2, name: "x", on: false, none: null, list: [1, "a", [true], { k: -0.5 }], nested: {} };
  const req = toCreateRunRequest({ benchmark: { name: "synthetic", options }, agent: { harness: "scripted" }, requestId: "k" });
  assert.deepEqual(req.run?.benchmark?.options?.fields?.["days"], { numberValue: 2 });
  assert.deepEqual(req.run?.benchmark?.options?.fields?.["none"], { nullValue: "NULL_VALUE" });

  // Encode and decode with the same proto definition and loader options as the client.
  const def = protoLoader.loadSync(PROTO_FILE, { ...LOADER_OPTIONS, includeDirs: [defaultProtoDir()] });
  const service = def["sclate.v1.Sclate"] as protoLoader.ServiceDefinition;
  const method = service["CreateRun"];
  assert.ok(method);
  const decoded = method.requestDeserialize(method.requestSerialize(req)) as CreateRunRequest__Output;
  assert.equal(decoded.requestId, "k");
  assert.ok(decoded.run);
  const run = toRun(decoded.run);
  assert.deepEqual(run.benchmark?.options, options);
  assert.deepEqual(run.agent?.options, {});
  assert.throws(() => toStruct({ bad: Number.NaN }), /\$\.bad: NaN/);
});

test("SclateError carries status, reason and field from trailing metadata", () => {
  const md = new Metadata();
  md.set("sclate-reason", "UNKNOWN_BENCHMARK");
  md.set("sclate-field", "run.benchmark.name");
  const e = new SclateError("CreateRun", status.INVALID_ARGUMENT, "no such benchmark", md);
  assert.equal(e.codeName, "INVALID_ARGUMENT");
  assert.equal(e.reason, "UNKNOWN_BENCHMARK");
  assert.equal(e.field, "run.benchmark.name");
  assert.equal(e.message, "CreateRun: INVALID_ARGUMENT: no such benchmark (reason=UNKNOWN_BENCHMARK field=run.benchmark.name)");
  const bare = new SclateError("GetRun", status.NOT_FOUND, "gone", new Metadata());
  assert.equal(bare.reason, undefined);
  assert.equal(bare.message, "GetRun: NOT_FOUND: gone");
});

test("run events become a union discriminated by kind", () => {
  const base = { seq: 7, run: "runs/r", simTime: { seconds: 86400, nanos: 5e8 }, wallTime: null };
  const ev = toRunEvent({ ...base, kind: "state", state: { state: "SUCCEEDED", reason: "" } });
  assert.equal(ev.kind, "state");
  assert.equal(formatEvent(ev), "#7 1970-01-02T00:00:00.500Z state SUCCEEDED");
  const turn = toRunEvent({ ...base, simTime: { seconds: 0, nanos: 0 }, kind: "turn",
    turn: { roundId: "", session: "", phase: "ended", reply: "a\nb", deliveryDelayMs: 1.25, harnessError: "", memory: null } });
  assert.equal(formatEvent(turn), '#7 - turn ended delay=1.3ms reply="a\\nb"');
  const failed = toRunEvent({ ...base, simTime: { seconds: 0, nanos: 0 }, kind: "turn",
    turn: { roundId: "", session: "", phase: "ended", reply: "", deliveryDelayMs: 2, harnessError: "exit 1", memory: null } });
  assert.equal(formatEvent(failed), '#7 - turn ended delay=2.0ms harness_error="exit 1"');
  assert.equal(toRunEvent({ ...base }).kind, "unknown");
  assert.equal(runName("abc"), "runs/abc");
  assert.equal(runName("runs/abc"), "runs/abc");
});
