"""The sclate.v1.Sclate service: requests in, the runs room's answers out."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from google.protobuf import empty_pb2
from sclate.v1 import sclate_pb2 as pb
from sclate.v1 import sclate_pb2_grpc as pb_grpc

from sclated.api._auth import current_tenant
from sclated.api._convert import event_to_proto, run_spec_from_proto, run_to_proto
from sclated.errors import InvalidArgument
from sclated.runs import RunManager

__all__ = ["SclateServicer"]


class SclateServicer(pb_grpc.SclateServicer):
    def __init__(self, manager: RunManager) -> None:
        self._runs = manager

    async def CreateRun(
        self, request: pb.CreateRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.Run:
        if not request.HasField("run"):
            raise InvalidArgument("run is required", field="run")
        if request.run.name:
            raise InvalidArgument("run.name is output only; set run_id instead", field="run.name")
        spec = run_spec_from_proto(request.run)
        view = await self._runs.create(
            current_tenant.get(), spec, run_id=request.run_id, request_id=request.request_id
        )
        return run_to_proto(view)

    async def GetRun(self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext) -> pb.Run:
        return run_to_proto(await self._runs.get(current_tenant.get(), request.name))

    async def ListRuns(
        self, request: pb.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRunsResponse:
        views, token = await self._runs.list(
            current_tenant.get(),
            page_size=request.page_size,
            page_token=request.page_token,
            filter=request.filter,
        )
        return pb.ListRunsResponse(runs=[run_to_proto(v) for v in views], next_page_token=token)

    async def CancelRun(
        self, request: pb.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.Run:
        return run_to_proto(await self._runs.cancel(current_tenant.get(), request.name))

    async def DeleteRun(
        self, request: pb.DeleteRunRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        await self._runs.delete(current_tenant.get(), request.name)
        return empty_pb2.Empty()

    async def ResumeRun(
        self, request: pb.ResumeRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.Run:
        return run_to_proto(await self._runs.resume(current_tenant.get(), request.name))

    async def WatchRun(
        self, request: pb.WatchRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.RunEvent]:
        async for ev in self._runs.watch(current_tenant.get(), request.name, request.after_seq):
            yield event_to_proto(ev, request.name)

    async def ListBenchmarks(
        self, request: pb.ListBenchmarksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListBenchmarksResponse:
        out = pb.ListBenchmarksResponse()
        for name in sorted(self._runs.registry.benchmarks):
            info = self._runs.registry.benchmarks[name].info
            out.benchmarks.add(
                name=info.name,
                description=info.description,
                data_format=info.data_format,
                scenarios=list(info.builtin_scenarios),
            )
        return out

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        out = pb.ListAgentsResponse()
        for name in sorted(self._runs.registry.agents):
            entry = self._runs.registry.agents[name]
            out.agents.add(
                name=entry.name,
                description=entry.description,
                sandboxed=entry.sandboxed,
                memory_systems=list(entry.memory_systems),
            )
        return out
