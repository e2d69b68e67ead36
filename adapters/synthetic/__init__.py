"""The built-in synthetic benchmark."""

from adapters.synthetic._synthetic import SyntheticBenchmark, SyntheticScenario

__all__ = ["SyntheticBenchmark", "SyntheticScenario"]
