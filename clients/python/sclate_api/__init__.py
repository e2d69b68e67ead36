"""sclate_api: the generated Python stubs of the gRPC API sclate.v1.

``from sclate_api.v1 import sclate_pb2, sclate_pb2_grpc``. Shared by the
`sclate` CLI and the daemon; regenerate with `make proto`.
"""
