"""sclated: the sclate daemon and its rooms (scheduler, clock, runs, runtime, capture, store, api)."""

from sclated.errors import SclateError

__all__ = ["SclateError"]
__version__ = "0.1.0"
