import * as assert from "node:assert/strict";

import { SclateError, status, statusName, type CreateRunInput, type RunEvent } from "../src";

export async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

/** Awaits `p`, which must reject with a SclateError of status `code`; returns it. */
export async function rejectsWith(p: Promise<unknown>, code: status): Promise<SclateError> {
  try {
    await p;
  } catch (e) {
    if (!(e instanceof SclateError)) throw e;
    assert.equal(e.codeName, statusName(code), `expected ${statusName(code)}, got: ${e.message}`);
    return e;
  }
  assert.fail(`expected a ${statusName(code)} error, but the call succeeded`);
}

/** Seqs strictly consecutive, from `after + 1`. */
export function assertContiguous(events: RunEvent[], after: number): void {
  events.forEach((ev, i) => assert.equal(ev.seq, after + 1 + i, `event ${i} has seq ${ev.seq}, expected ${after + 1 + i}`));
}

export function syntheticRun(extra: Partial<CreateRunInput> = {}): CreateRunInput {
  return {
    benchmark: { name: "synthetic", options: { days: 2, events_per_day: 3 } },
    agent: { harness: "scripted" },
    ...extra,
  };
}
