// Cancel, interrupt (daemon shutdown), restart and resume, against a real sclated.
import * as assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { SclateClient, status, type CreateRunInput, type RunEvent } from "../src";
import { startDaemon, type Daemon } from "./daemon";
import { assertContiguous, collect, rejectsWith } from "./helpers";

const T = { timeout: 90_000 };
/** On SIGTERM, interrupt runs still running after 1 s (the default waits 30 s). */
const FAST_DRAIN = ["--drain-grace-s", "1"];

/** A run that stays RUNNING for long: real-time clock, tasks an hour apart. */
const slowRun = (): CreateRunInput => ({
  benchmark: { name: "synthetic", options: { days: 1, events_per_day: 2, spacing_s: 3600 } },
  agent: { harness: "scripted" },
  clock: { mode: "REALTIME", rate: 1 },
});

/** Watches until the run reports RUNNING, then stops watching; returns the events seen. */
async function untilRunning(client: SclateClient, name: string): Promise<RunEvent[]> {
  const seen: RunEvent[] = [];
  for await (const ev of client.watchRun(name)) {
    seen.push(ev);
    if (ev.kind === "state") {
      assert.ok(["PENDING", "RUNNING"].includes(ev.state.state), `run ended early: ${ev.state.state} ${ev.state.reason}`);
      if (ev.state.state === "RUNNING") return seen;
    }
  }
  assert.fail("the watch ended before the run was RUNNING");
}

describe("run lifecycle across cancel and daemon restart", { timeout: 300_000 }, () => {
  const daemons: Daemon[] = [];
  const clients: SclateClient[] = [];
  after(async () => {
    for (const c of clients) c.close();
    for (const d of daemons) await d.stop().catch(() => undefined);
  });

  let interrupted = "";
  let interruptedEvents: RunEvent[] = [];
  let stateDir = "";

  test("a RUNNING run can be cancelled", T, async () => {
    const d = await startDaemon({ cleanup: false, args: FAST_DRAIN });
    daemons.push(d);
    stateDir = d.dir;
    const client = new SclateClient({ endpoint: d.tcp });
    clients.push(client);

    const run = await client.createRun(slowRun());
    const head = await untilRunning(client, run.name);
    const cancelled = await client.cancelRun(run.name);
    assert.equal(cancelled.state, "CANCELLED");
    const tail = await collect(client.watchRun(run.name, head[head.length - 1]!.seq));
    const all = [...head, ...tail];
    assertContiguous(all, 0);
    const last = all[all.length - 1];
    assert.ok(last?.kind === "state" && last.state.state === "CANCELLED", "the watch did not end with CANCELLED");
    await rejectsWith(client.resumeRun(run.name), status.FAILED_PRECONDITION);

    // A second slow run is left RUNNING for the daemon's shutdown.
    const slow = await client.createRun(slowRun());
    await untilRunning(client, slow.name);
    interrupted = slow.name;
  });

  test("SIGTERM interrupts running runs and exits 0", T, async () => {
    const d = daemons.pop();
    assert.ok(d && interrupted, "needs the daemon and run of the previous test");
    for (const c of clients.splice(0)) c.close();
    const { code, signal } = await d.stop();
    assert.equal(signal, null, d.log());
    assert.equal(code, 0, d.log());
  });

  test("after a restart the run is INTERRUPTED and resumeRun continues it", T, async () => {
    assert.ok(stateDir && interrupted, "needs the state of the previous tests");
    const d = await startDaemon({ dir: stateDir, args: FAST_DRAIN });
    daemons.push(d);
    const client = new SclateClient({ endpoint: d.tcp });
    clients.push(client);

    const run = await client.getRun(interrupted);
    assert.equal(run.state, "INTERRUPTED", `state ${run.state} (${run.stateReason})`);
    interruptedEvents = await collect(client.watchRun(interrupted));
    assertContiguous(interruptedEvents, 0);
    assert.equal(interruptedEvents.length, run.lastEventSeq);
    const last = interruptedEvents[interruptedEvents.length - 1];
    assert.ok(last?.kind === "state" && last.state.state === "INTERRUPTED", "history does not end with INTERRUPTED");

    const resumed = await client.resumeRun(interrupted);
    assert.ok(["PENDING", "RUNNING"].includes(resumed.state), `resumed run is ${resumed.state}`);
    // Continue watching from where the history ended, cancel once it runs again.
    const more: RunEvent[] = [];
    for await (const ev of client.watchRun(interrupted, run.lastEventSeq)) {
      more.push(ev);
      if (ev.kind === "state" && ev.state.state === "RUNNING") await client.cancelRun(interrupted);
    }
    assertContiguous(more, run.lastEventSeq);
    const end = more[more.length - 1];
    assert.ok(end?.kind === "state" && end.state.state === "CANCELLED", "the resumed run did not end CANCELLED");

    daemons.pop();
    client.close();
    const { code } = await d.stop();
    assert.equal(code, 0, d.log());
  });

  test("after a crash (SIGKILL) a restarted daemon resumes the run and keeps the history seen", T, async () => {
    const d1 = await startDaemon({ cleanup: false, args: FAST_DRAIN });
    daemons.push(d1);
    const c1 = new SclateClient({ endpoint: d1.tcp });
    clients.push(c1);
    const run = await c1.createRun(slowRun());
    const seen = await untilRunning(c1, run.name);
    c1.close();
    await d1.kill();
    daemons.pop();

    const d2 = await startDaemon({ dir: d1.dir, args: FAST_DRAIN });
    daemons.push(d2);
    const c2 = new SclateClient({ endpoint: d2.tcp });
    clients.push(c2);
    const events: RunEvent[] = [];
    let resumedRunning = false;
    for await (const ev of c2.watchRun(run.name)) {
      events.push(ev);
      if (ev.seq > seen.length && ev.kind === "state" && ev.state.state === "RUNNING" && !resumedRunning) {
        resumedRunning = true;
        await c2.cancelRun(run.name);
      }
    }
    assertContiguous(events, 0);
    assert.ok(resumedRunning, "the run was not running again after the restart");
    // Every event a client saw before the crash is in the history, unchanged.
    assert.deepEqual(events.slice(0, seen.length), seen);
    const end = events[events.length - 1];
    assert.ok(end?.kind === "state" && end.state.state === "CANCELLED");
    c2.close();
    daemons.pop();
    assert.equal((await d2.stop()).code, 0, d2.log());
  });
});
