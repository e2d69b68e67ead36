// Creates a run of the built-in `synthetic` benchmark with the in-daemon
// `scripted` agent, prints each of its events on one line while it runs,
// then prints the final state. Exits 0 only if the run SUCCEEDED.
//
//   npm run example                             (sclated's default 127.0.0.1:7431)
//   npm run example -- 127.0.0.1:PORT           (or unix:/path/to/sclated.sock)
//   SCLATE_ENDPOINT=... SCLATE_TOKEN=... npm run example
import { SclateClient, SclateError, formatEvent } from "../src";

async function main(): Promise<number> {
  // sclated listens on 127.0.0.1:7431 by default.
  const endpoint = process.argv[2] ?? process.env["SCLATE_ENDPOINT"] ?? "127.0.0.1:7431";
  const client = new SclateClient({ endpoint, token: process.env["SCLATE_TOKEN"] || undefined });
  try {
    const run = await client.createRun({
      benchmark: { name: "synthetic", options: { days: 2, events_per_day: 3 } },
      agent: { harness: "scripted" },
      labels: { example: "create-and-watch" },
    });
    console.log(`created ${run.name} (${run.state})`);

    let lastSeq = 0;
    for await (const ev of client.watchRun(run.name, lastSeq)) {
      console.log(formatEvent(ev));
      lastSeq = ev.seq;
    }

    const final = await client.getRun(run.name);
    // score is unset (undefined) while no round is graded.
    const score = final.results ? ` score=${final.results.score ?? "ungraded"} rounds=${final.results.rounds}` : "";
    const reason = final.stateReason ? ` reason=${JSON.stringify(final.stateReason)}` : "";
    console.log(`final ${final.name} ${final.state}${reason}${score} last_event_seq=${final.lastEventSeq}`);
    return final.state === "SUCCEEDED" ? 0 : 1;
  } catch (e) {
    if (e instanceof SclateError) {
      console.error(`error: ${e.message}`);
      return 1;
    }
    throw e;
  } finally {
    client.close();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  },
);
