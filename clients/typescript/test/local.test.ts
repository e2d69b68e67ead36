// Runs the client against a real sclated serving one local tenant without auth.
import * as assert from "node:assert/strict";
import { execFile } from "node:child_process";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";

import { SclateClient, SclateError, formatEvent, status, type Run, type RunEvent } from "../src";
import { startDaemon, type Daemon } from "./daemon";
import { assertContiguous, collect, rejectsWith, syntheticRun } from "./helpers";

const T = { timeout: 60_000 };

describe("sclated, local tenant without auth", { timeout: 300_000 }, () => {
  let d: Daemon;
  let client: SclateClient;
  const created: string[] = [];
  let firstRun: Run | undefined;
  let firstEvents: RunEvent[] = [];

  before(async () => {
    d = await startDaemon();
    client = new SclateClient({ endpoint: d.tcp });
  });
  after(async () => {
    client?.close();
    // Normally stopped by the last test; this only cleans up after a failure.
    if (d) await d.stop().catch(() => undefined);
  });

  test("lists benchmarks and agents", T, async () => {
    const benchmarks = await client.listBenchmarks();
    const synthetic = benchmarks.find((b) => b.name === "synthetic");
    assert.ok(synthetic, `no synthetic benchmark in ${JSON.stringify(benchmarks.map((b) => b.name))}`);
    assert.ok(synthetic.description.length > 0, "synthetic has no description");

    const agents = await client.listAgents();
    const scripted = agents.find((a) => a.name === "scripted");
    assert.ok(scripted, `no scripted agent in ${JSON.stringify(agents.map((a) => a.name))}`);
    assert.equal(scripted.sandboxed, false, "the scripted agent runs inside the daemon");
  });

  test("serves the same API on its unix socket", T, async () => {
    assert.ok(d.unix, "ready.json has no unix socket");
    const viaUnix = new SclateClient({ endpoint: `unix:${d.unix}` });
    try {
      const names = (await viaUnix.listBenchmarks()).map((b) => b.name).sort();
      assert.deepEqual(names, (await client.listBenchmarks()).map((b) => b.name).sort());
    } finally {
      viaUnix.close();
    }
  });

  test("creates a synthetic run and watches it to SUCCEEDED", T, async () => {
    const run = await client.createRun(syntheticRun({ labels: { suite: "ts" } }));
    created.push(run.name);
    assert.match(run.name, /^runs\/[^/]+$/);
    assert.ok(["PENDING", "RUNNING", "SUCCEEDED"].includes(run.state), `unexpected initial state ${run.state}`);
    assert.deepEqual(run.benchmark?.options, { days: 2, events_per_day: 3 });
    assert.equal(run.agent?.harness, "scripted");
    assert.deepEqual(run.labels, { suite: "ts" });

    const events = await collect(client.watchRun(run.name));
    assert.ok(events.length > 0, "no events");
    assertContiguous(events, 0);
    for (const ev of events) {
      assert.equal(ev.run, run.name);
      assert.notEqual(ev.kind, "unknown", `event ${ev.seq} has no kind`);
      assert.ok(!formatEvent(ev).includes("\n"), "an event formats to more than one line");
    }
    const last = events[events.length - 1];
    assert.ok(last?.kind === "state", `the stream did not end with a state change: ${last && formatEvent(last)}`);
    assert.equal(last.state.state, "SUCCEEDED", `run ended ${last.state.state}: ${last.state.reason}`);
    assert.ok(events.some((e) => e.kind === "fire"), "no fire events");

    // The options reached the benchmark: 2 days of 3 tasks, one graded round a day.
    const tasks = events.filter((e) => e.kind === "fire" && /^d\d+\.task\d+$/.test(e.fire.eventId));
    assert.equal(tasks.length, 6, `task fires: ${tasks.map(formatEvent).join("; ")}`);
    assert.equal(events.filter((e) => e.kind === "verdict").length, 2);

    const final = await client.getRun(run.name);
    assert.equal(final.state, "SUCCEEDED");
    assert.equal(final.results?.rounds, 2);
    assert.equal(final.lastEventSeq, last.seq);
    assert.ok(final.endTime, "a finished run has an end_time");
    firstRun = final;
    firstEvents = events;
  });

  test("watching a finished run from its last seq yields nothing and ends", T, async () => {
    assert.ok(firstRun, "needs the run of the previous test");
    const rest = await collect(client.watchRun(firstRun.name, firstRun.lastEventSeq));
    assert.deepEqual(rest, []);
    const again = await collect(client.watchRun(firstRun.name, 0));
    assert.deepEqual(again, firstEvents, "replaying a finished run gives different events");
  });

  test("resumes a live watch from a sequence number without gaps or duplicates", T, async () => {
    const run = await client.createRun(syntheticRun());
    created.push(run.name);
    const head: RunEvent[] = [];
    for await (const ev of client.watchRun(run.name, 0)) {
      head.push(ev);
      if (head.length === 3) break; // cancels the stream
    }
    assert.equal(head.length, 3);
    const resumeFrom = head[2]!.seq;
    const tail = await collect(client.watchRun(run.name, resumeFrom));
    const joined = [...head, ...tail];
    assertContiguous(joined, 0);
    const last = joined[joined.length - 1];
    assert.ok(last?.kind === "state" && last.state.state === "SUCCEEDED", "resumed watch did not reach SUCCEEDED");
    // The same history as a single watch of the finished run.
    assert.deepEqual(joined, await collect(client.watchRun(run.name, 0)));
    // And from an arbitrary middle point.
    const mid = Math.floor(joined.length / 2);
    assert.deepEqual(await collect(client.watchRun(run.name, mid)), joined.slice(mid));
  });

  test("an aborted watch rejects with the abort reason", T, async () => {
    assert.ok(firstRun);
    const ac = new AbortController();
    const seen: number[] = [];
    await assert.rejects(
      (async () => {
        for await (const ev of client.watchRun(firstRun!.name, 0, { signal: ac.signal })) {
          seen.push(ev.seq);
          ac.abort();
        }
      })(),
      (e: unknown) => e instanceof Error && e.name === "AbortError",
    );
    assert.ok(seen.length >= 1);
  });

  test("CreateRun with the same request_id returns the same run", T, async () => {
    const requestId = `ts-idem-${process.pid}-${Date.now()}`;
    const a = await client.createRun(syntheticRun({ requestId }));
    const b = await client.createRun(syntheticRun({ requestId }));
    assert.equal(b.name, a.name);
    const reused = await rejectsWith(
      client.createRun(syntheticRun({ requestId, labels: { changed: "yes" } })),
      status.INVALID_ARGUMENT,
    );
    assert.equal(reused.reason, "REQUEST_ID_REUSED");
    assert.equal(reused.field, "request_id");
    const c = await client.createRun(syntheticRun({ requestId: `${requestId}-other` }));
    assert.notEqual(c.name, a.name);
    created.push(a.name, c.name);
    for (const name of [a.name, c.name]) {
      const evs = await collect(client.watchRun(name));
      const last = evs[evs.length - 1];
      assert.ok(last?.kind === "state" && last.state.state === "SUCCEEDED", `${name} did not succeed`);
    }
  });

  test("CreateRun with a run_id names the run", T, async () => {
    const runId = `ts-named-${Date.now()}`;
    const run = await client.createRun(syntheticRun({ runId }));
    created.push(run.name);
    assert.equal(run.name, `runs/${runId}`);
    assert.equal((await client.getRun(runId)).name, run.name, "getRun accepts a bare id");
    await collect(client.watchRun(run.name));
  });

  test("lists runs page by page", T, async () => {
    const all: string[] = [];
    for await (const run of client.listAllRuns({ pageSize: 2 })) all.push(run.name);
    assert.equal(new Set(all).size, all.length, `duplicates across pages: ${all.join(", ")}`);
    assert.deepEqual([...all].sort(), [...new Set(created)].sort());

    const first = await client.listRuns({ pageSize: 2 });
    assert.equal(first.runs.length, 2);
    assert.notEqual(first.nextPageToken, "", "more runs than one page, but no next_page_token");

    const succeeded = await collect(client.listAllRuns({ filter: "state=SUCCEEDED" }));
    assert.ok(succeeded.length >= 1 && succeeded.every((r) => r.state === "SUCCEEDED"));
    const labelled = await collect(client.listAllRuns({ filter: "labels.suite=ts" }));
    assert.deepEqual(labelled.map((r) => r.name), [created[0]]);
  });

  test("an unknown benchmark is INVALID_ARGUMENT with a reason", T, async () => {
    const e = await rejectsWith(
      client.createRun({ benchmark: { name: "no-such-benchmark" }, agent: { harness: "scripted" } }),
      status.INVALID_ARGUMENT,
    );
    assert.ok(e.reason, `no sclate-reason trailer in: ${e.message}`);
    assert.ok(e instanceof SclateError && e.method === "CreateRun");
  });

  test("an unknown run is NOT_FOUND", T, async () => {
    await rejectsWith(client.getRun("runs/does-not-exist"), status.NOT_FOUND);
    await rejectsWith(collect(client.watchRun("runs/does-not-exist")), status.NOT_FOUND);
  });

  test("cancelling a finished run returns it unchanged; it can then be deleted", T, async () => {
    assert.ok(firstRun);
    const cancelled = await client.cancelRun(firstRun.name);
    assert.equal(cancelled.state, "SUCCEEDED");
    await rejectsWith(client.resumeRun(firstRun.name), status.FAILED_PRECONDITION);
    await client.deleteRun(firstRun.name);
    await rejectsWith(client.getRun(firstRun.name), status.NOT_FOUND);
    created.splice(created.indexOf(firstRun.name), 1);
  });

  test("the create-and-watch example succeeds against the daemon", T, async () => {
    const script = path.resolve(__dirname, "..", "examples", "create-and-watch.js");
    const { stdout } = await promisify(execFile)(process.execPath, [script, d.tcp], { timeout: 50_000 });
    const lines = stdout.trimEnd().split("\n");
    assert.match(lines[0] ?? "", /^created runs\/\S+ \(\w+\)$/);
    assert.ok(lines.slice(1, -1).length > 0 && lines.slice(1, -1).every((l) => /^#\d+ /.test(l)), stdout);
    assert.match(lines[lines.length - 1] ?? "", /^final runs\/\S+ SUCCEEDED/);
  });

  test("SIGTERM stops the daemon with exit code 0", T, async () => {
    client.close();
    const { code, signal } = await d.stop();
    assert.equal(signal, null, `sclated was killed by ${signal}:\n${d.log()}`);
    assert.equal(code, 0, `sclated exited ${code}:\n${d.log()}`);
  });
});
