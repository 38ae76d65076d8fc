"""Task engines for work split into independent parts: inline, a process pool, or Ray tasks; one
`run_tasks` for all three, shared by ingest and parallel verify.

Knows nothing of catalogs or datasets. May import only the base modules (`dsinspect.errors`, `extras`).

Internal: use it through `dsinspect.loaders` (or `dsinspect`); its modules may change without notice.
"""
