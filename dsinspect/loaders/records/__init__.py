"""Run records: what a run leaves behind (its segments' run specs and a per-step fingerprint log per
rank), the fingerprint of a batch, and a job's own batch transform with the fingerprint of what it produced.

Modules: `runlog` (the format: file names, fingerprints, per-sample digests, parsing), `recorder` (writing
one rank's record), `run` (a record read back: segments, the kept history, superseded lines, gaps),
`transforms` (a job's transform and its output's fingerprint).

May import `order`, `store`, `format`, `dsinspect.errors`.

Internal: use it through `dsinspect.loaders` (or `dsinspect`); its modules may change without notice.
"""
