"""A separate client process for the daemon benchmark: it makes unary calls
(GetRun, ListRuns, CreateRun of a tiny run) every few milliseconds until told
to stop, and writes their latencies. Kept out of the process that consumes
the watch streams, so its numbers are what another user of the daemon sees.

Usage: python -m sclated.bench._probe ADDR STOP_FILE OUT_FILE [reads]

``reads``: GetRun and ListRuns only (the soak, whose own lanes create the runs):
ListRuns walks the pages over and over, GetRun asks for a run of the last page,
so both see runs of every age.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import grpc
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc


async def probe(addr: str, stop: Path, out: Path, *, reads_only: bool = False) -> None:
    latencies: dict[str, list[float]] = {"GetRun": [], "ListRuns": []}
    if not reads_only:
        latencies["CreateRun"] = []
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = pb_grpc.SclateStub(channel)
        run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="scripted"))
        run.benchmark.options.update({"days": 1, "events_per_day": 1})
        run.agent.options.update({"turn_ms": 1})
        names: list[str] = []
        token = ""
        i = 0
        while not stop.exists():
            i += 1
            t0 = time.perf_counter()
            if i % 10 == 1 and not reads_only:
                created = await stub.CreateRun(pb.CreateRunRequest(run=run, request_id=f"probe-{i}"))
                names.append(created.name)
                latencies["CreateRun"].append((time.perf_counter() - t0) * 1000)
            elif i % 2:
                page = await stub.ListRuns(pb.ListRunsRequest(page_size=20, page_token=token))
                latencies["ListRuns"].append((time.perf_counter() - t0) * 1000)
                if reads_only:
                    token = page.next_page_token
                    if page.runs:
                        names = [page.runs[i % len(page.runs)].name]
            elif names:
                try:
                    await stub.GetRun(pb.GetRunRequest(name=names[-1]))
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.NOT_FOUND:  # deleted meanwhile: an answer all the same
                        raise
                latencies["GetRun"].append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.02)
    out.write_text(json.dumps(latencies))


if __name__ == "__main__":
    asyncio.run(probe(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), reads_only=sys.argv[4:] == ["reads"]))
