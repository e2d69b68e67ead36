"""sclate: the Python client of the sclated daemon (the `sclate` CLI; the API stubs are in `sclate_api`)."""

__version__ = "0.1.0"
