"""Scale-out: admitted runs' workers in Ray actors on a cluster, the daemon as the
control plane (executor ``ray``; see docs/scale-out.md). Imported only when the
daemon is configured for it: the local executor never imports Ray."""

from sclated.cluster._executor import NAMESPACE, PLACEMENTS, ClusterConfig, RayExecutor, actor_name
from sclated.cluster._local import LocalCluster, LocalNode, alive_node_ids
from sclated.cluster._node import BufferedCalls, NodeModelClient, NodeSettings, node_services, node_state_dir
from sclated.cluster._records import Batch, Record, RecordBuffer

__all__ = [
    "NAMESPACE",
    "PLACEMENTS",
    "Batch",
    "BufferedCalls",
    "ClusterConfig",
    "LocalCluster",
    "LocalNode",
    "NodeModelClient",
    "NodeSettings",
    "RayExecutor",
    "Record",
    "RecordBuffer",
    "actor_name",
    "alive_node_ids",
    "node_services",
    "node_state_dir",
]
