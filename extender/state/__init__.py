"""What the extender knows of the cluster: the cluster cache fed by list+watch, the assume cache of
allocations in flight, and how stored objects are slimmed and shared.

Imports kube/, allocator/ and common/. Scheduling rules stay out: the plugin registers the pod indexes
it needs (ClusterCache.pod_index).
"""
