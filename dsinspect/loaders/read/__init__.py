"""The read engine: the node-local verified shard cache, zero-copy column views and gathers, the batch
reader, the stateful `Loader` and its `Batch`, and the counters a person debugging a job needs.

May import `records`, `order`, `store`, `format`, `dsinspect.errors`; never a UI or torch.

Internal: use it through `dsinspect.loaders` (or `dsinspect`); its modules may change without notice.
"""
