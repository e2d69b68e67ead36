"""Benchmark and agent adapters."""

from adapters._base import (
    AgentAdapter,
    BenchmarkAdapter,
    BenchmarkInfo,
    GradeContext,
    JudgeReply,
    RoundInfo,
    Scenario,
    ScenarioConfig,
    TurnResult,
    Verdict,
)

__all__ = [
    "AgentAdapter",
    "BenchmarkAdapter",
    "BenchmarkInfo",
    "GradeContext",
    "JudgeReply",
    "RoundInfo",
    "Scenario",
    "ScenarioConfig",
    "TurnResult",
    "Verdict",
]
