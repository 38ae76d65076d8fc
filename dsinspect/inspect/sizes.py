"""Byte counts for people (1536 -> '1.5 KiB'), in every face. A module of its own, with no imports, so
that `dsinspect ls` formats sizes without loading the views, rich or Pillow."""

from __future__ import annotations

__all__ = ["human_bytes"]


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
