"""A save/restore harness for every stateful iterator in the project (after torchdata.nodes'
`run_test_save_load_state`): the stream continued from a saved state must equal the stream that
never stopped, at any midpoint, and a resume of a resume must too.

Usage, for an object with `state_dict()` / `load_state_dict(state)`:

    check_save_load(
        make=lambda: Loader(spec, rank, catalog),   # a fresh object, each call
        next_item=lambda loader: next(iter(loader)),  # advance by one item, return it
        total=30,                                    # items in the reference stream
        comparable=lambda batch: (batch.step, tuple(batch.row_hashes)),
        boundaries=[10, 20],                          # item counts where an epoch ends
    )

`make` must build an object that starts where the reference starts; `comparable` turns an item
into something `==` can judge (numpy arrays into tuples, say). Objects are closed with
`close(obj)` (default: its `.close()` if it has one). States are passed through JSON on the way
(`json_roundtrip=True`), so a state that is not plain data fails here, not in a checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

__all__ = ["check_save_load", "SaveLoadReport", "default_midpoints"]


@dataclass(frozen=True)
class SaveLoadReport:
    """What the harness checked: the reference length, the midpoints and the resume-of-resume pairs."""

    total: int
    midpoints: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...]


def default_midpoints(total: int, boundaries: Iterable[int] = ()) -> tuple[int, ...]:
    """The start, a few middles, the end, and each epoch boundary with its neighbours."""
    points = {0, 1, total // 4, total // 3, total // 2, (2 * total) // 3, total - 1, total}
    for b in boundaries:
        points.update((b - 1, b, b + 1))
    return tuple(sorted(p for p in points if 0 <= p <= total))


def _close_default(obj: Any) -> None:
    close = getattr(obj, "close", None)
    if callable(close):
        close()


def check_save_load(make: Callable[[], Any], next_item: Callable[[Any], Any], total: int, *,
                    comparable: Callable[[Any], Any] = lambda item: item,
                    boundaries: Sequence[int] = (), midpoints: Sequence[int] | None = None,
                    state_dict: Callable[[Any], Any] = lambda obj: obj.state_dict(),
                    load_state_dict: Callable[[Any, Any], None] = lambda obj, state: obj.load_state_dict(state),
                    close: Callable[[Any], None] = _close_default, json_roundtrip: bool = True,
                    resume_of_resume: bool = True, restore_into_used: bool = True) -> SaveLoadReport:
    """Run the reference stream of `total` items, then for each midpoint m: consume m items, save,
    restore into a fresh object (and into one already advanced elsewhere) and require the remaining
    items to equal the reference; also save again after a restore and restore that (resume of a
    resume). Raises AssertionError naming the midpoint and the first differing item."""
    owned: list[Any] = []

    def fresh() -> Any:
        obj = make()
        owned.append(obj)
        return obj

    def take(obj: Any, n: int) -> list[Any]:
        return [comparable(next_item(obj)) for _ in range(n)]

    def saved(obj: Any) -> Any:
        state = state_dict(obj)
        return json.loads(json.dumps(state)) if json_roundtrip else state

    def expect(got: list[Any], start: int, what: str) -> None:
        want = reference[start:start + len(got)]
        for offset, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"{what}: item {start + offset} differs from the uninterrupted run:\n  got  {g}\n  want {w}"
        assert len(got) == len(want), f"{what}: {len(got)} items, the reference has {len(want)} from {start}"

    try:
        reference = take(fresh(), total)
        assert take(fresh(), total) == reference, "two fresh objects disagree: the stream is not deterministic"
        points = tuple(midpoints) if midpoints is not None else default_midpoints(total, boundaries)
        for m in points:
            original = fresh()
            expect(take(original, m), 0, f"fresh run to midpoint {m}")
            state = saved(original)
            restored = fresh()
            load_state_dict(restored, state)
            expect(take(restored, total - m), m, f"restored at {m}")
            expect(take(original, total - m), m, f"the saved object itself after state_dict() at {m}")
            if restore_into_used:
                used = fresh()
                take(used, min(total, (m + total) // 2 + 1))
                load_state_dict(used, state)
                expect(take(used, total - m), m, f"restored at {m} into an object already advanced elsewhere")
        pairs = _resume_pairs(points) if resume_of_resume else ()
        for m1, m2 in pairs:
            first = fresh()
            take(first, m1)
            second = fresh()
            load_state_dict(second, saved(first))
            expect(take(second, m2 - m1), m1, f"resumed at {m1}, run to {m2}")
            third = fresh()
            load_state_dict(third, saved(second))
            expect(take(third, total - m2), m2, f"resume of a resume ({m1} then {m2})")
        return SaveLoadReport(total, points, pairs)
    finally:
        for obj in owned:
            close(obj)


def _resume_pairs(points: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Pairs m1 <= m2 spread over the midpoints, including a save straight after a restore."""
    pts = sorted(set(points))
    if not pts:
        return ()
    pairs = {(pts[0], pts[-1]), (pts[len(pts) // 2], pts[len(pts) // 2]), (pts[0], pts[len(pts) // 2])}
    if len(pts) > 2:
        pairs.add((pts[1], pts[-2]))
        pairs.add((pts[len(pts) // 3], pts[(2 * len(pts)) // 3]))
    return tuple(sorted(pairs))
