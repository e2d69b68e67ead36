"""The capture addon that runs inside every sandbox under mitmdump.

``capture.py`` is the script mitmdump loads (the addon and its hooks); the
modules beside it hold one concern each: ``record`` (the call-record schema,
shared with the daemon's ``sclated.capture.CallRecord``), ``_attribution``
(run, role, API and thread of a call), ``_sse`` (event streams reassembled),
``_tokens`` (token ids and logprobs), ``_call`` (one call in flight and its
record), ``_control`` (the daemon's control socket), ``_spool`` (records on
disk until acknowledged). Standard library and mitmproxy only: nothing from
``sclated``. The sandbox image installs this directory as ``/opt/sclate/proxy/``.
"""
