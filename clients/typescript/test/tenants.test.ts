// Runs the client against a real sclated with a tokens file (two tenants).
import * as assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { SclateClient, status } from "../src";
import { startDaemon, type Daemon } from "./daemon";
import { collect, rejectsWith, syntheticRun } from "./helpers";

const T = { timeout: 60_000 };
const TOKENS = { "tok-alice-0123456789": "alice", "tok-bob-0123456789": "bob" };

describe("sclated with a tokens file", { timeout: 300_000 }, () => {
  let d: Daemon;
  const clients: SclateClient[] = [];
  const connect = (token?: string): SclateClient => {
    const c = new SclateClient({ endpoint: d.tcp, token });
    clients.push(c);
    return c;
  };

  before(async () => {
    d = await startDaemon({ tokens: TOKENS });
  });
  after(async () => {
    for (const c of clients) c.close();
    if (d) await d.stop().catch(() => undefined);
  });

  test("a call without a token is UNAUTHENTICATED", T, async () => {
    const e = await rejectsWith(connect().listBenchmarks(), status.UNAUTHENTICATED);
    assert.equal(e.method, "ListBenchmarks");
    await rejectsWith(connect().createRun(syntheticRun()), status.UNAUTHENTICATED);
    await rejectsWith(collect(connect().watchRun("runs/anything")), status.UNAUTHENTICATED);
  });

  test("a call with an unknown token is UNAUTHENTICATED", T, async () => {
    await rejectsWith(connect("not-a-token").listAgents(), status.UNAUTHENTICATED);
  });

  test("tenants do not see each other's runs", T, async () => {
    const alice = connect("tok-alice-0123456789");
    const bob = connect("tok-bob-0123456789");
    assert.ok((await alice.listBenchmarks()).some((b) => b.name === "synthetic"));

    const run = await alice.createRun(syntheticRun({ requestId: "shared-key" }));
    const evs = await collect(alice.watchRun(run.name));
    const last = evs[evs.length - 1];
    assert.ok(last?.kind === "state" && last.state.state === "SUCCEEDED");
    assert.equal((await alice.getRun(run.name)).state, "SUCCEEDED");

    await rejectsWith(bob.getRun(run.name), status.NOT_FOUND);
    await rejectsWith(collect(bob.watchRun(run.name)), status.NOT_FOUND);
    await rejectsWith(bob.cancelRun(run.name), status.NOT_FOUND);
    await rejectsWith(bob.deleteRun(run.name), status.NOT_FOUND);
    assert.deepEqual(await collect(bob.listAllRuns()), []);
    assert.deepEqual((await collect(alice.listAllRuns())).map((r) => r.name), [run.name]);

    // The idempotency key is per tenant: bob's request with the same key is a new run.
    const bobs = await bob.createRun(syntheticRun({ requestId: "shared-key" }));
    assert.notEqual(bobs.name, run.name);
    await collect(bob.watchRun(bobs.name));
    assert.equal((await alice.getRun(run.name)).state, "SUCCEEDED", "bob's delete attempt changed alice's run");
  });

  test("SIGTERM stops the daemon with exit code 0", T, async () => {
    for (const c of clients) c.close();
    const { code, signal } = await d.stop();
    assert.equal(signal, null, `sclated was killed by ${signal}:\n${d.log()}`);
    assert.equal(code, 0, `sclated exited ${code}:\n${d.log()}`);
  });
});
