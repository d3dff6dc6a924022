"""Talking to the API server: the client (credentials, requests, watches), list+watch into a sink,
Events posted in the background,
leader election on a Lease, and reading Kubernetes objects from YAML and JSON files.

Imports allocator/ and common/ only; it knows nothing of the cache or of scheduling.
"""
