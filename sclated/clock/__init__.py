"""The simulated clock and the leases that keep it flowing."""

from sclated.clock._clock import MAX_SIM_NS, ClockConfig, ClockMode, Jump, SimClock, TimePublisher
from sclated.clock._leases import ExpiredLease, Lease, LeaseChange, LeaseInfo, LeaseTable
from sclated.clock._ledger import WallLedger

__all__ = [
    "MAX_SIM_NS",
    "ClockConfig",
    "ClockMode",
    "ExpiredLease",
    "Jump",
    "Lease",
    "LeaseChange",
    "LeaseInfo",
    "LeaseTable",
    "SimClock",
    "TimePublisher",
    "WallLedger",
]
