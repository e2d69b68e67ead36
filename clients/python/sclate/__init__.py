"""sclate: the Python client of the sclated daemon (API stubs in `sclate.v1`, the `sclate` CLI)."""

__version__ = "0.1.0"
