"""The sclate.v1.Sclate service: requests in, the runs room's answers out."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from typing import BinaryIO

import grpc
from google.protobuf import empty_pb2
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.api._auth import current_tenant
from sclated.api._convert import event_to_proto, run_spec_from_proto, run_to_proto, snapshot_to_proto
from sclated.capture import Sample
from sclated.errors import InvalidArgument
from sclated.runs import RunManager

__all__ = ["EXPORT_CHUNK_BYTES", "SclateServicer"]

EXPORT_CHUNK_BYTES = 1024 * 1024


def _trajectory(s: Sample, run: str) -> pb.Trajectory:
    t = pb.Trajectory(
        trajectory_id=s.sample_id,
        run=run,
        role=s.role,
        thread=s.thread,
        prompt_token_ids=s.prompt_token_ids,
        response_ids=s.response_ids,
        loss_mask=s.loss_mask,
        branch_reason=s.branch_reason,
        call_ids=s.call_ids,
        stop_reason=s.finish_reason or "",
    )
    # All or nothing, as in the file exports: a partial list would misalign
    # importance ratios against response_ids.
    if s.has_logprobs:
        t.rollout_logprobs.extend(lp for lp in s.logprobs if lp is not None)
    if s.reward is not None:
        t.reward = s.reward
    return t


def _trajectories(samples: Sequence[Sample], run: str) -> list[pb.Trajectory]:
    return [_trajectory(s, run) for s in samples]


def _open_sized(path: str) -> tuple[BinaryIO, int]:
    f = open(path, "rb")  # noqa: SIM115  # closed by the streaming handler
    return f, os.fstat(f.fileno()).st_size


class SclateServicer(pb_grpc.SclateServicer):
    def __init__(self, manager: RunManager) -> None:
        self._runs = manager

    async def CreateRun(self, request: pb.CreateRunRequest, context: grpc.aio.ServicerContext) -> pb.Run:
        if not request.HasField("run"):
            raise InvalidArgument("run is required", field="run")
        if request.run.name:
            raise InvalidArgument("run.name is output only; set run_id instead", field="run.name")
        spec = run_spec_from_proto(request.run)
        view = await self._runs.create(current_tenant.get(), spec, run_id=request.run_id, request_id=request.request_id)
        return run_to_proto(view)

    async def GetRun(self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext) -> pb.Run:
        return run_to_proto(await self._runs.get(current_tenant.get(), request.name))

    async def ListRuns(self, request: pb.ListRunsRequest, context: grpc.aio.ServicerContext) -> pb.ListRunsResponse:
        views, token = await self._runs.list(
            current_tenant.get(),
            page_size=request.page_size,
            page_token=request.page_token,
            filter=request.filter,
        )
        return pb.ListRunsResponse(runs=[run_to_proto(v) for v in views], next_page_token=token)

    async def CancelRun(self, request: pb.CancelRunRequest, context: grpc.aio.ServicerContext) -> pb.Run:
        return run_to_proto(await self._runs.cancel(current_tenant.get(), request.name))

    async def DeleteRun(self, request: pb.DeleteRunRequest, context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        await self._runs.delete(current_tenant.get(), request.name)
        return empty_pb2.Empty()

    async def ResumeRun(self, request: pb.ResumeRunRequest, context: grpc.aio.ServicerContext) -> pb.Run:
        return run_to_proto(await self._runs.resume(current_tenant.get(), request.name))

    async def WatchRun(
        self, request: pb.WatchRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.RunEvent]:
        async for ev in self._runs.watch(current_tenant.get(), request.name, request.after_seq):
            yield event_to_proto(ev, request.name)

    async def SaveSnapshot(self, request: pb.SaveSnapshotRequest, context: grpc.aio.ServicerContext) -> pb.Snapshot:
        view = await self._runs.save_snapshot(
            current_tenant.get(), request.run, request.snapshot_id, at_turn_boundary=request.at_turn_boundary
        )
        return snapshot_to_proto(view)

    async def RestoreSnapshot(self, request: pb.RestoreSnapshotRequest, context: grpc.aio.ServicerContext) -> pb.Run:
        view = await self._runs.restore(
            current_tenant.get(), request.snapshot, request.new_run_id, dict(request.labels)
        )
        return run_to_proto(view)

    async def BranchRun(self, request: pb.BranchRunRequest, context: grpc.aio.ServicerContext) -> pb.BranchRunResponse:
        group, views = await self._runs.branch(
            current_tenant.get(),
            request.snapshot,
            request.count,
            group_id=request.group_id,
            labels=dict(request.labels),
            seeds=list(request.sampling_seeds),
            request_id=request.request_id,
        )
        return pb.BranchRunResponse(group=group, runs=[run_to_proto(v) for v in views])

    async def WatchGroup(
        self, request: pb.WatchGroupRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.RunEvent]:
        async for ev in self._runs.watch_group(current_tenant.get(), request.group):
            yield event_to_proto(ev, f"runs/{ev.run.partition('/')[2]}")

    async def ListSnapshots(
        self, request: pb.ListSnapshotsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSnapshotsResponse:
        views = await self._runs.list_snapshots(current_tenant.get(), request.run)
        return pb.ListSnapshotsResponse(snapshots=[snapshot_to_proto(v) for v in views])

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
                version=entry.version,
                wire_apis=list(entry.wire_apis),
                capabilities=list(entry.capabilities),
                image=entry.image,
                process_clock=entry.process_clock,
            )
        return out

    async def StreamTrajectories(
        self, request: pb.StreamTrajectoriesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.Trajectory]:
        samples = await self._runs.trajectories(
            current_tenant.get(),
            request.run,
            list(request.trainable_roles),
            list(request.roles),
            reward_mode=request.reward_mode,
        )
        # Copying token lists into messages is proportional to the run's tokens.
        for msg in await asyncio.to_thread(_trajectories, samples, request.run):
            yield msg

    async def ExportTrajectories(
        self, request: pb.ExportTrajectoriesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ExportChunk]:
        tmp_dir = await asyncio.to_thread(tempfile.mkdtemp, prefix="sclated-export-")
        try:
            path = os.path.join(tmp_dir, "export.jsonl")
            report = await self._runs.export(
                current_tenant.get(),
                request.run,
                request.format,
                list(request.trainable_roles),
                path,
                list(request.roles),
                group=request.group,
                reward_mode=request.reward_mode,
                unrewarded=request.unrewarded,
            )
            f = await asyncio.to_thread(_open_sized, path)
        finally:
            # Once open the file needs no name: a client that walks away
            # mid-stream, or a daemon killed mid-stream, leaves nothing on disk.
            await asyncio.to_thread(shutil.rmtree, tmp_dir, ignore_errors=True)
        file, size = f
        try:
            sent = 0
            while sent < size:
                data = await asyncio.to_thread(file.read, EXPORT_CHUNK_BYTES)
                if not data:
                    raise RuntimeError(f"export file ended at {sent} of {size} bytes")
                sent += len(data)
                if sent < size:
                    yield pb.ExportChunk(data=data)
                else:
                    yield pb.ExportChunk(
                        data=data,
                        rows=report.rows,
                        left_out=[
                            pb.LeftOutSample(sample_id=lo.sample_id, reason=lo.reason, run=lo.run)
                            for lo in report.left_out
                        ],
                    )
        finally:
            file.close()
