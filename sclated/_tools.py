"""`sclated doctor | images build | model serve | bench NAME | demo`: the local tools.

They run on the daemon's host with the daemon's code (Docker, the embedded
model, the proxy, plotting), so they belong to `sclated`, not to the `sclate`
client. ``sclated`` runs the daemon unless its first argument names one of
them; each tool is imported only when it runs, and each parses its own
options (``sclated doctor --help``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["EPILOG", "TOOLS", "run_tool"]

TOOLS = ("doctor", "images", "model", "bench", "demo")
EPILOG = "Local tools: sclated doctor | images build | model serve | bench NAME | demo (each takes --help)."
# Spelled out (importing sclated.bench here would load every benchmark's imports for
# any tool); tests/daemon/test_local_tools.py holds it to sclated.bench.BENCHES.
BENCHES = (
    "scheduler",
    "daemon",
    "sandbox",
    "proxy",
    "model",
    "e2e",
    "harness",
    "memory",
    "gaia2",
    "branches",
    "rollouts",
    "fuzz",
    "faults",
    "soak",
    "cluster",
)


def _bench(args: argparse.Namespace, rest: list[str]) -> int:
    from sclated.bench import run_bench_cli

    return run_bench_cli(args.which, rest)


def _images(args: argparse.Namespace, rest: list[str]) -> int:
    from adapters.harnesses import register_harness_images
    from adapters.swebench import register_images as register_swebench_images
    from sclated.runtime import build_images_cli

    register_harness_images()
    register_swebench_images()
    return build_images_cli(rest)


def _model_serve(args: argparse.Namespace, rest: list[str]) -> int:
    from sclated.model.__main__ import main as model_main

    return model_main(rest)


def _doctor(args: argparse.Namespace, rest: list[str]) -> int:
    from sclated.doctor import run_doctor_cli

    return run_doctor_cli(rest)


def _demo(args: argparse.Namespace, rest: list[str]) -> int:
    if "--scheduler-only" in rest:
        from sclated.demo import run_demo_cli as scheduler_demo

        return scheduler_demo([a for a in rest if a != "--scheduler-only"])
    from sclated.e2e import run_demo_cli

    return run_demo_cli(rest)


Sub = argparse._SubParsersAction  # the type add_subparsers returns


def _tool(
    sub: Sub[argparse.ArgumentParser], name: str, help_: str, run: Callable[..., int], *, which: bool = False
) -> None:
    # add_help=False and a remainder: the tool's own parser reads its options (and --help).
    p = sub.add_parser(name, help=help_, add_help=False)
    if which:
        p.add_argument("which", choices=BENCHES, metavar="{" + ",".join(BENCHES) + "}")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(run=run)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sclated", description="The local tools of the sclate daemon.")
    sub = p.add_subparsers(dest="tool", required=True)
    _tool(sub, "bench", "benchmarks of sclate itself (prints JSON with --json)", _bench, which=True)
    images = sub.add_parser("images", help="sandbox images").add_subparsers(
        dest="images_cmd", required=True, metavar="{build}"
    )
    _tool(images, "build", "build every image locally (content-hashed tags; nothing rebuilt twice)", _images)
    model = sub.add_parser("model", help="the embedded model").add_subparsers(
        dest="model_cmd", required=True, metavar="{serve}"
    )
    _tool(model, "serve", "serve a GGUF (default SmolLM2-135M-Instruct) over OpenAI/Anthropic APIs", _model_serve)
    _tool(sub, "doctor", "check the engine, images, simulated time, proxy and model", _doctor)
    _tool(sub, "demo", "run the demo and print its report (--scheduler-only: in process, no sandbox)", _demo)
    return p


def run_tool(argv: list[str]) -> int:
    """Run the tool ``argv[0]`` (one of :data:`TOOLS`) with the rest of ``argv``; the exit code."""
    args, extra = build_parser().parse_known_args(argv)
    try:
        return int(args.run(args, [*extra, *args.rest]))
    except KeyboardInterrupt:
        return 130
