"""The HTTP front: the aiohttp server of the extender verbs and the debug port, the extender wire
format, the device map and the plain-words explanation.

Imports plugin/, state/, kube/, allocator/ and common/; never controllers/ or the composition root.
"""
