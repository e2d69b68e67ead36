"""Runs: a scheduler and a clock driven together, effects handed to executors."""

from sclated.runs._loop import EffectExecutor, RunLoop, RunObserver, RunSummary

__all__ = ["EffectExecutor", "RunLoop", "RunObserver", "RunSummary"]
