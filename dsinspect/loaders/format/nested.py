"""Nested lists as numpy sees them: the leaves in order and the shape, when every level is regular.
Shared by the array views (dsinspect/inspect) and the array diff (diff_fields.py)."""

from __future__ import annotations

__all__ = ["flatten"]


def flatten(value: list) -> tuple[list, tuple[int, ...] | None]:
    """All leaves in order, and the shape when every level is regular (else None)."""
    if not any(isinstance(v, list) for v in value):
        return value, (len(value),)
    flat, shapes = [], set()
    for v in value:
        leaves, shape = flatten(v if isinstance(v, list) else [v])
        flat += leaves
        shapes.add(shape)
    inner = shapes.pop() if len(shapes) == 1 else None
    return flat, (len(value), *inner) if inner is not None else None
