"""Audit tools: replay of the exact batch of (step, rank) in O(1), the rows it names read straight from
row groups, a job's fingerprint log checked against replay, and a replayed batch exported for a report.

May import `read`, `records`, `order`, `store`, `format`, `dsinspect.errors`.

Internal: use it through `dsinspect.loaders` (or `dsinspect`); its modules may change without notice.
"""
