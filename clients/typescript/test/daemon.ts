// Starts a real sclated for the tests and stops it with SIGTERM.
import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { defaultProtoDir } from "../src";

export interface ReadyInfo {
  tcp: string;
  unix: string;
  pid: number;
}

export interface Daemon extends ReadyInfo {
  dir: string;
  logFile: string;
  /** Sends SIGTERM and resolves with the exit code (null if killed by a signal). */
  stop(timeoutMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGKILL (a crash); resolves once the process is gone. */
  kill(): Promise<void>;
  /** The daemon's output so far. */
  log(): string;
}

/** `$SCLATED`, or the repository's `.venv/bin/sclated`. */
export function sclatedPath(): string {
  return process.env["SCLATED"] ?? path.resolve(defaultProtoDir(), "..", ".venv", "bin", "sclated");
}

const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of running) p.kill("SIGKILL");
});

function isReadyInfo(v: unknown): v is ReadyInfo {
  if (typeof v !== "object" || v === null) return false;
  const r = v as Record<string, unknown>;
  return typeof r["tcp"] === "string" && typeof r["unix"] === "string" && typeof r["pid"] === "number";
}

export interface StartOptions {
  /** `TOKEN -> TENANT`, written to a --tokens-file. */
  tokens?: Record<string, string>;
  /** Reuse this folder (and the state dir in it), e.g. to restart a daemon. */
  dir?: string;
  /** Remove the folder after a clean stop (default true). */
  cleanup?: boolean;
  /** Extra command-line flags. */
  args?: string[];
  readyTimeoutMs?: number;
}

export async function startDaemon(options: StartOptions = {}): Promise<Daemon> {
  const exe = sclatedPath();
  if (!fs.existsSync(exe)) throw new Error(`sclated not found at ${exe} (build the .venv or set SCLATED)`);
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), "sclate-ts-"));
  const stateDir = path.join(dir, "state");
  const readyFile = path.join(dir, "ready.json");
  const logFile = path.join(dir, "sclated.log");
  fs.rmSync(readyFile, { force: true });
  const args = ["--listen", "127.0.0.1:0", "--state-dir", stateDir, "--ready-file", readyFile, ...(options.args ?? [])];
  if (options.tokens) {
    const tokensFile = path.join(dir, "tokens");
    const lines = Object.entries(options.tokens).map(([token, tenant]) => `${token} ${tenant}\n`);
    fs.writeFileSync(tokensFile, lines.join(""), { mode: 0o600 });
    args.push("--tokens-file", tokensFile);
  }
  const logFd = fs.openSync(logFile, "a");
  const child = spawn(exe, args, { stdio: ["ignore", logFd, logFd] });
  fs.closeSync(logFd);
  running.add(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on("exit", (code, signal) => {
      running.delete(child);
      resolve({ code, signal });
    });
  });
  let exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  void exited.then((e) => (exitInfo = e));
  const log = (): string => (fs.existsSync(logFile) ? fs.readFileSync(logFile, "utf8") : "");

  const deadline = Date.now() + (options.readyTimeoutMs ?? 60_000);
  let ready: ReadyInfo | undefined;
  while (!ready) {
    if (exitInfo) {
      throw new Error(`sclated ${args.join(" ")} exited (${JSON.stringify(exitInfo)}) before ready:\n${log()}`);
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`sclated did not write ${readyFile} in time:\n${log()}`);
    }
    try {
      const parsed: unknown = JSON.parse(fs.readFileSync(readyFile, "utf8"));
      if (isReadyInfo(parsed)) ready = parsed;
    } catch {
      // not there yet, or half written
    }
    if (!ready) await sleep(50);
  }

  const info = ready;
  return {
    ...info,
    dir,
    logFile,
    log,
    async kill() {
      if (!exitInfo) child.kill("SIGKILL");
      await exited;
    },
    async stop(timeoutMs = 20_000) {
      if (!exitInfo) child.kill("SIGTERM");
      const timer = sleep(timeoutMs, undefined, { ref: false }).then(() => "timeout" as const);
      const res = await Promise.race([exited, timer]);
      if (res === "timeout") {
        child.kill("SIGKILL");
        throw new Error(`sclated did not exit within ${timeoutMs} ms of SIGTERM:\n${log()}`);
      }
      if (res.code === 0 && options.cleanup !== false && !process.env["SCLATE_KEEP_TMP"]) fs.rmSync(dir, { recursive: true, force: true });
      return res;
    },
  };
}
