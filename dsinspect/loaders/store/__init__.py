"""The store: the one boundary to storage (fsspec URLs, atomic writes, locks, injected faults), the
catalog and its path layout, immutable versions, tags, the writer, derive, verify, gc and addresses.

May import `format`, `compute` and `dsinspect.errors`.

Internal: use it through `dsinspect.loaders` (or `dsinspect`); its modules may change without notice.
"""
