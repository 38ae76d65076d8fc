"""Run records: what a run leaves behind (its run specs and a per-step fingerprint log per rank), the
fingerprint of a batch, and a job's own batch transform with the fingerprint of what it produced.

May import `order`, `store`, `format`, `dsinspect.errors`.

Internal: use it through `dsinspect.loaders` (or `dsinspect`); its modules may change without notice.
"""
