"""Admission webhook of dra-extender: keeps ResourceClaim status writes safe whoever writes them.

server (HTTPS, /webhook/mutate and /webhook/validate) -> admission (routing, metrics, error policy) -> one
module per rule: tolerations (mutating), claim_status, pods, selectors (and derived), taint_rules. The
cluster is read through lookup.ClusterLookup (the extender hands in a view of its ClusterCache,
extender.state.lookup); common.tls reloads the serving certificate, certs creates one. The webhook imports
common/, never extender/.
"""
