"""Task engines for work split into independent parts: inline, a process pool, or Ray tasks; one
`run_tasks` for all three, shared by ingest and parallel verify.

Knows nothing of catalogs or datasets. May import only `dsinspect.errors`.
"""
