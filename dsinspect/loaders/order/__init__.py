"""The order: the run spec, and the sample of every (step, rank) as pure arithmetic over it (keyed
permutations, mixtures, epochs), and the loader state that resumes it.

No I/O beyond resolving a spec's sources in the catalog. May import `store`, `format`, `dsinspect.errors`.

Internal: use it through `dsinspect.loaders` (or `dsinspect`); its modules may change without notice.
"""
