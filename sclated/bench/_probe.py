"""A separate client process for the daemon benchmark: it makes unary calls
(GetRun, ListRuns, CreateRun of a tiny run) every few milliseconds until told
to stop, and writes their latencies. Kept out of the process that consumes
the watch streams, so its numbers are what another user of the daemon sees.

Usage: python -m sclated.bench._probe ADDR STOP_FILE OUT_FILE
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


async def probe(addr: str, stop: Path, out: Path) -> None:
    latencies: dict[str, list[float]] = {"GetRun": [], "ListRuns": [], "CreateRun": []}
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = pb_grpc.SclateStub(channel)
        run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="scripted"))
        run.benchmark.options.update({"days": 1, "events_per_day": 1})
        run.agent.options.update({"turn_ms": 1})
        names: list[str] = []
        i = 0
        while not stop.exists():
            i += 1
            t0 = time.perf_counter()
            if i % 10 == 1:
                created = await stub.CreateRun(pb.CreateRunRequest(run=run, request_id=f"probe-{i}"))
                names.append(created.name)
                latencies["CreateRun"].append((time.perf_counter() - t0) * 1000)
            elif i % 2:
                await stub.ListRuns(pb.ListRunsRequest(page_size=20))
                latencies["ListRuns"].append((time.perf_counter() - t0) * 1000)
            elif names:
                await stub.GetRun(pb.GetRunRequest(name=names[-1]))
                latencies["GetRun"].append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.02)
    out.write_text(json.dumps(latencies))


if __name__ == "__main__":
    asyncio.run(probe(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
