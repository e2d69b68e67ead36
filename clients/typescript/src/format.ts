import type { RunEvent, Timestamp } from "./types";
import { toDate } from "./types";

/** ISO time, or "-" when unset (the daemon sends 0 for "no simulated time yet"). */
function iso(ts: Timestamp | null): string {
  const d = toDate(ts);
  return d && d.getTime() !== 0 ? d.toISOString() : "-";
}

function quote(s: string, max = 80): string {
  const t = s.length > max ? `${s.slice(0, max)}…` : s;
  return JSON.stringify(t);
}

/** One line describing a run event, e.g. `#12 2024-01-02T09:00:00.000Z verdict round=r3 graded score=1`. */
export function formatEvent(ev: RunEvent): string {
  const head = `#${ev.seq} ${iso(ev.simTime)} ${ev.kind}`;
  switch (ev.kind) {
    case "fire": {
      const f = ev.fire;
      const effects = f.effects.length ? ` effects=${f.effects.join(",")}` : "";
      return `${head} ${f.eventId} source=${f.source} due=${iso(f.dueTime)}${effects}`;
    }
    case "jump":
      return `${head} ${iso(ev.jump.fromTime)} -> ${iso(ev.jump.toTime)}`;
    case "lease":
      return `${head} ${ev.lease.change} ${ev.lease.lease} holder=${ev.lease.holder} held=${ev.lease.heldCount}`;
    case "turn": {
      const t = ev.turn;
      const reply = t.reply ? ` reply=${quote(t.reply)}` : "";
      const round = t.roundId ? ` round=${t.roundId}` : "";
      const session = t.session ? ` session=${t.session}` : "";
      const failed = t.harnessError ? ` harness_error=${quote(t.harnessError)}` : "";
      return `${head} ${t.phase}${round}${session} delay=${t.deliveryDelayMs.toFixed(1)}ms${reply}${failed}`;
    }
    case "verdict": {
      const v = ev.verdict;
      const reason = v.reason ? ` reason=${quote(v.reason)}` : "";
      return `${head} round=${v.roundId} ${v.graded ? `score=${v.score}` : "ungraded"}${reason}`;
    }
    case "state":
      return `${head} ${ev.state.state}${ev.state.reason ? ` reason=${quote(ev.state.reason)}` : ""}`;
    case "unknown":
      return head;
  }
}
