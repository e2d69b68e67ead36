"""Benchmarks of sclate itself, behind `sclated bench NAME --json`."""

from sclated.bench._branches import branch_figures
from sclated.bench._cli import BENCHES, run_bench_cli
from sclated.bench._daemon import data_root_args, reap_daemon_sandboxes, start_daemon_process
from sclated.bench._sandbox import bench_sandbox, measure_publish_latency
from sclated.bench._scheduler import bench_scheduler

__all__ = [
    "BENCHES",
    "bench_sandbox",
    "bench_scheduler",
    "branch_figures",
    "data_root_args",
    "measure_publish_latency",
    "reap_daemon_sandboxes",
    "run_bench_cli",
    "start_daemon_process",
]
