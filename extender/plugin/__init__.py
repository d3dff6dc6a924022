"""The scheduling plugin, split by kube-scheduler's extension points: planning (PreFilter), nodecheck
(Filter), placement and scoring (Score), scheduling (the extender verbs, Reserve and PreBind), with
claim resolution, verdicts, holds, extended resources, node allocatable resources, the filter cache,
claim writing and the scheduler's metrics.

Imports state/, kube/, allocator/ and common/; never http/, controllers/ or the composition root.
"""
