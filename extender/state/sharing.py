"""Equal parts of the cache's stored objects kept once.

A large cluster repeats the same small values everywhere: every GPU of one model carries the same
attribute values and capacity, every claim made for one kind of workload the same spec, every object on
a node that node's name, every object of a kind the same apiVersion, every reserved claim its pod's name
and uid. The JSON decoder makes a fresh copy of each. `ObjectSharer` rewrites a ResourceSlice,
ResourceClaim, Pod or Node the cache takes (the cache owns what it is given) so that its parts equal to other
stored objects' are the very same objects.

Shared parts must never be edited in place. That already holds for the cache: stored objects are
replaced, never changed (ClaimWriter and the controllers build new dicts for what they write).

The tables are bounded and emptied when full, so a stream of unique values (device UUIDs, say) cannot
grow them without limit; sharing then starts over with the objects that follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

MAX_ENTRIES = 100_000


class ObjectSharer:
    def __init__(self, max_entries: int = MAX_ENTRIES,
                 pod_by_uid: Callable[[str], dict | None] | None = None) -> None:
        """`pod_by_uid`: the stored pods, whose name and uid strings a claim's reservedFor then shares."""
        self.max_entries = max_entries
        self._pod_by_uid = pod_by_uid
        self._strings: dict[str, str] = {}
        self._values: dict[str, Any] = {}   # canonical JSON text -> the shared value
        self._pinned: dict[str, Any] = {}   # node name -> the shared node selector pinning it alone

    def string(self, value: Any) -> Any:
        """The shared str equal to `value`; anything else comes back unchanged."""
        if not isinstance(value, str):
            return value
        found = self._strings.get(value)
        return found if found is not None else self._added(self._strings, value, value)

    def value(self, value: Any) -> Any:
        """The shared JSON value equal to `value` (equal as JSON: 1, 1.0 and true stay apart)."""
        try:
            # A fresh str: orjson's bytes would keep the whole buffer it wrote into (about 4 KB) per entry.
            key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
        except TypeError:   # not JSON (a snapshot's YAML can hold anything): kept as it is
            return value
        found = self._values.get(key)
        return found if found is not None else self._added(self._values, key, value)

    def _added(self, table: dict[Any, Any], key: Any, value: Any) -> Any:
        if len(table) >= self.max_entries:
            table.clear()
        table[key] = value
        return value

    def _common(self, raw: dict) -> dict:
        self._share_strings(raw, ("apiVersion", "kind"))
        meta = raw.get("metadata")
        if isinstance(meta, dict):
            self._share_strings(meta, ("namespace", "creationTimestamp"))   # objects made in one second
            if "finalizers" in meta:   # the same one or two names on every claim (delete-protection)
                meta["finalizers"] = self.value(meta["finalizers"])
        return raw

    @staticmethod
    def _kept(value: Any, previous: Any, key: str) -> Any:
        """`previous[key]` when it equals `value` (a dict, compared in C: far cheaper than serializing
        it), else None. Equal here means equal as Python values, where 1 == 1.0: one field of one
        object does not change its JSON type between versions."""
        if not isinstance(value, dict) or not isinstance(previous, dict):
            return None
        before = previous.get(key)
        return before if before is not None and value == before else None

    def _share_strings(self, obj: Any, keys: tuple[str, ...]) -> None:
        """`obj[key]`, for each of `keys` that holds a str, made the shared str (the sync runs this for
        every string field of every object: written inline, and only where the object is another)."""
        if not isinstance(obj, dict):
            return
        strings = self._strings
        for key in keys:
            value = obj.get(key)
            if isinstance(value, str):
                found = strings.get(value)
                if found is None:
                    self._added(strings, value, value)
                elif found is not value:
                    obj[key] = found

    def resource_slice(self, raw: dict) -> dict:
        self._common(raw)
        spec = raw.get("spec")
        if not isinstance(spec, dict):
            return raw
        self._share_strings(spec, ("driver", "nodeName"))
        self._share_strings(spec.get("pool"), ("name",))
        devices = spec.get("devices")
        for device in devices if isinstance(devices, list) else ():
            if not isinstance(device, dict):
                continue
            self._share_strings(device, ("name",))
            if "attributes" in device:
                device["attributes"] = self.value(device["attributes"])
            if "capacity" in device:
                device["capacity"] = self.value(device["capacity"])
        return raw

    def resource_claim(self, raw: dict, previous: dict | None = None) -> dict:
        """`previous`: the version `raw` replaces, whose parts are shared already: an unchanged spec
        or allocation is taken from it without serializing it again (most updates change neither)."""
        self._common(raw)
        if "spec" in raw:
            kept = self._kept(raw["spec"], previous, "spec")
            raw["spec"] = kept if kept is not None else self.value(raw["spec"])
        status = raw.get("status")
        if not isinstance(status, dict):
            return raw
        if not status:   # every claim not allocated yet
            raw["status"] = self.value(status)
            return raw
        reserved = status.get("reservedFor")
        for consumer in reserved if isinstance(reserved, list) else ():
            self._share_strings(consumer, ("resource",))
            self._pod_consumer(consumer)
        if not isinstance(status.get("allocation"), dict):
            return raw
        allocation = status["allocation"]
        kept = self._kept(allocation, previous.get("status") if previous is not None else None, "allocation")
        if kept is not None:
            status["allocation"] = kept
            return raw
        if "nodeSelector" in allocation:
            allocation["nodeSelector"] = self._node_selector(allocation["nodeSelector"])
        devices = allocation.get("devices")
        results = devices.get("results") if isinstance(devices, dict) else None
        for result in results if isinstance(results, list) else ():
            self._share_strings(result, ("request", "driver", "pool", "device"))
        return raw

    def _node_selector(self, selector: Any) -> Any:
        """The shared node selector equal to `selector`. One that pins a node by name (what every
        allocation of node-local devices has, one per node) is found by that name, not by its JSON
        text: at 20,000 nodes those texts were 3 MB of table keys."""
        pinning = _pinned_node(selector)
        if pinning is None:
            shared = self.value(selector)
            if shared is selector:   # the first of its kind: its strings as everyone's
                self._node_selector_strings(selector)
            return shared
        shared = self._pinned.get(pinning["values"][0])
        if shared is None:   # the node's first: its name, key and operator as everyone's
            self._share_strings(pinning, ("key", "operator"))
            name = pinning["values"][0] = self.string(pinning["values"][0])
            shared = self._added(self._pinned, name, selector)
        return shared

    def _node_selector_strings(self, selector: Any) -> None:
        """An allocation's node selector names its node in the terms' values: the same string as the
        node's name everywhere else, and the same few keys and operators as every other selector."""
        terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
        for term in terms if isinstance(terms, list) else ():
            for field in ("matchFields", "matchExpressions"):
                requirements = term.get(field) if isinstance(term, dict) else None
                for requirement in requirements if isinstance(requirements, list) else ():
                    self._share_strings(requirement, ("key", "operator"))
                    values = requirement.get("values") if isinstance(requirement, dict) else None
                    if isinstance(values, list):
                        values[:] = [self.string(value) for value in values]

    def node(self, raw: dict) -> dict:
        """A Node's name, and a label value equal to it (kubernetes.io/hostname, usually), as the string
        the objects on the node hold."""
        meta = raw.get("metadata")
        if not isinstance(meta, dict):
            return raw
        self._share_strings(meta, ("name",))
        name, labels = meta.get("name"), meta.get("labels")
        if isinstance(name, str) and isinstance(labels, dict):
            for key, value in labels.items():
                if value == name:
                    labels[key] = name
        return raw

    def _pod_consumer(self, consumer: Any) -> None:
        """A reserving pod's name and uid as the very strings its stored Pod holds (a claim reserved for a
        pod the cache has not seen yet keeps its own)."""
        if self._pod_by_uid is None or not isinstance(consumer, dict) or consumer.get("resource") != "pods":
            return
        uid = consumer.get("uid")
        pod = self._pod_by_uid(uid) if isinstance(uid, str) else None
        meta = pod.get("metadata") if pod is not None else None
        if isinstance(meta, dict) and meta.get("uid") == uid and meta.get("name") == consumer.get("name"):
            consumer["uid"], consumer["name"] = meta["uid"], meta["name"]

    def pod(self, raw: dict, previous: dict | None = None) -> dict:
        """`previous`: as for resource_claim (the spec of a pod changes once, when it is bound). Its name
        and uid strings are kept too, so the claims reserved for the pod go on sharing them."""
        self._common(raw)
        meta, before = raw.get("metadata"), previous.get("metadata") if previous is not None else None
        if isinstance(meta, dict) and isinstance(before, dict):
            for key in ("name", "uid"):
                if key in meta and meta[key] == before.get(key):
                    meta[key] = before[key]
        spec = raw.get("spec")
        kept = self._kept(spec, previous, "spec")
        if kept is not None:
            raw["spec"] = kept
        elif isinstance(spec, dict):
            self._share_strings(spec, ("nodeName", "schedulerName", "priorityClassName", "preemptionPolicy"))
            for key in ("tolerations", "containers", "initContainers"):
                if key in spec:
                    spec[key] = self.value(spec[key])
            self._pod_claims(spec)
        status = raw.get("status")
        if isinstance(status, dict) and status.keys() <= {"phase"}:
            raw["status"] = self.value(status)   # what most pods' kept status is: the same few
        else:
            self._share_strings(status, ("phase",))
        return raw

    def _pod_claims(self, spec: dict) -> None:
        """A pod's claim references: the same list on every pod of a workload made from claim templates;
        naming claims directly, a list of its own whose reference names still repeat."""
        refs = spec.get("resourceClaims")
        if not isinstance(refs, list):
            return
        if not any(isinstance(ref, dict) and "resourceClaimName" in ref for ref in refs):
            spec["resourceClaims"] = self.value(refs)
            return
        for ref in refs:
            self._share_strings(ref, ("name", "resourceClaimTemplateName"))


def _pinned_node(selector: Any) -> dict | None:
    """The requirement naming the node when `selector` is exactly {"nodeSelectorTerms": [{"matchFields":
    [{"key": "metadata.name", "operator": "In", "values": [name]}]}]} with a str name, else None. Two
    such selectors with one name are the same JSON. (Read once for every allocated claim: written for
    speed, as the sync's share of it was measurable.)"""
    if type(selector) is not dict or len(selector) != 1:
        return None
    terms = selector.get("nodeSelectorTerms")
    if type(terms) is not list or len(terms) != 1 or type(term := terms[0]) is not dict or len(term) != 1:
        return None
    fields = term.get("matchFields")
    if type(fields) is not list or len(fields) != 1:
        return None
    field = fields[0]
    if type(field) is not dict or len(field) != 3:
        return None
    values = field.get("values")
    if (field.get("key") != "metadata.name" or field.get("operator") != "In" or type(values) is not list
            or len(values) != 1 or type(values[0]) is not str):
        return None
    return field
