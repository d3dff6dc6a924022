"""What the search works on: one prepared (sub)request, and one device tentatively given to it."""

from __future__ import annotations

from allocator.cel import Selector
from allocator.compatibility import Undo
from allocator.derived import DerivedAttributes
from allocator.model import DeviceClass, ExactRequest
from allocator.pools import DeviceEntry
from allocator.quantity import Quantity


class RequestData:
    """One ``exactly`` request or one subrequest, prepared for the search."""

    __slots__ = (
        "admin",
        "all_devices",
        "base_name",
        "capacity_requests",
        "claim_index",
        "claim_ref",
        "class_programs",
        "derived",
        "device_class",
        "eligible",
        "error_mask",
        "full_name",
        "mask",
        "name",
        "num_devices",
        "parent_name",
        "request",
        "request_programs",
        "selectable",
        "sub_name",
        "tolerations",
    )

    def __init__(
        self,
        request: ExactRequest,
        *,
        claim_index: int,
        claim_ref: str,
        parent_name: str | None,
        device_class: DeviceClass,
        admin: bool,
    ) -> None:
        self.request = request
        self.claim_index = claim_index  # position of its claim in the allocate() call
        self.claim_ref = claim_ref  # "namespace/name" of its claim, for messages
        self.name = request.name
        self.parent_name = parent_name
        self.base_name = parent_name if parent_name is not None else request.name
        self.sub_name = request.name if parent_name is not None else None
        self.full_name = f"{parent_name}/{request.name}" if parent_name is not None else request.name
        self.device_class = device_class
        self.admin = admin
        self.tolerations = request.tolerations
        self.capacity_requests = request.capacity_requests
        self.num_devices = 0
        self.all_devices: list[DeviceEntry] | None = None
        # Compiled lazily, like upstream (no devices: no error).
        self.class_programs: list[Selector] | None = None
        self.request_programs: list[Selector] | None = None
        self.selectable: list[bool | None] = []
        # Per candidate: 0 not eligible, 1 eligible, SHARED eligible if its remaining capacity fits.
        self.eligible: list[int | None] = []
        self.mask: int | None = None  # candidates that may be selectable (pruning only)
        self.error_mask = 0  # candidates whose check is a hard error (set with mask)
        self.derived: DerivedAttributes | None = None  # its derived attributes (DRADerivedAttributes)


class Chosen:
    """A device tentatively allocated to a request."""

    __slots__ = ("compatibility", "consumed", "counted", "entry", "multiple", "request", "share_id")

    def __init__(self, entry: DeviceEntry, request: RequestData, *, multiple: bool) -> None:
        self.entry = entry
        self.request = request
        self.multiple = multiple
        self.counted = False  # counters were consumed for it
        self.compatibility: Undo | None = None  # how it narrowed compatibility groups
        self.share_id: str | None = None
        self.consumed: dict[str, Quantity] | None = None
