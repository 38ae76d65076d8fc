"""Counters a person debugging a slow or stuck job needs, cheap enough to keep always on."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

import numpy as np

__all__ = ["ReadStats", "PeriodicLogger"]

log = logging.getLogger("dsinspect.loader")


class ReadStats:
    """Thread-safe counters of one process's reads: fetches, cache, retries, consumer waits."""

    COUNTERS = ("batches", "shards_fetched", "bytes_fetched", "parts_fetched", "cache_hits", "cache_misses",
                "retries", "verify_failures", "evictions")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.COUNTERS, 0)
        self._fetch_latency: deque[float] = deque(maxlen=512)
        self.wait_seconds = 0.0
        self.fetch_seconds = 0.0
        self._recent: deque[tuple[float, float]] = deque(maxlen=64)  # (waited, batch interval)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def fetched_parts(self, nbytes: int, parts: int, seconds: float) -> None:
        """A ranged read of `parts` parts of a shard (format/shard_index.py)."""
        with self._lock:
            self._counts["parts_fetched"] += parts
            self._counts["bytes_fetched"] += nbytes
            self._fetch_latency.append(seconds)
            self.fetch_seconds += seconds

    def fetched(self, nbytes: int, seconds: float) -> None:
        with self._lock:
            self._counts["shards_fetched"] += 1
            self._counts["bytes_fetched"] += nbytes
            self._fetch_latency.append(seconds)
            self.fetch_seconds += seconds

    def consumed(self, waited: float, interval: float) -> None:
        """One batch handed to the consumer after it `waited` seconds, `interval` after the last one."""
        with self._lock:
            self._counts["batches"] += 1
            self.wait_seconds += waited
            self._recent.append((waited, interval))

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            lat = np.array(self._fetch_latency) if self._fetch_latency else np.zeros(1)
            recent = list(self._recent)
            waited = sum(w for w, _ in recent)
            spent = sum(i for _, i in recent) or 1e-9
            return {**self._counts, "wait_seconds": round(self.wait_seconds, 6),
                    "fetch_latency_p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 3),
                    "fetch_latency_p95_ms": round(float(np.percentile(lat, 95)) * 1e3, 3),
                    "recent_wait_fraction": round(waited / spent, 4) if recent else 0.0}

    def starvation(self, threshold: float = 0.5) -> str | None:
        """A one-line reason when the consumer spent more than `threshold` of recent time waiting."""
        s = self.snapshot()
        if s["batches"] < 16 or s["recent_wait_fraction"] < threshold:
            return None
        if self.fetch_seconds >= 0.5 * self.wait_seconds:
            cause = (f"storage: {s['shards_fetched']} shard fetches took {self.fetch_seconds:.1f} s "
                     f"({s['fetch_latency_p50_ms']:.0f} ms p50); warm the cache or raise prefetch")
        elif s["retries"]:
            cause = f"storage: {s['retries']} retried fetches"
        else:
            cause = "reading/decoding rows is slower than the training step; add DataLoader workers"
        return (f"data-starved: the training loop waited {s['recent_wait_fraction']:.0%} of recent time "
                f"for batches ({cause})")


class PeriodicLogger:
    """Logs a stats line every `interval` seconds and warns once per interval when starved."""

    def __init__(self, stats: ReadStats, interval: float | None):
        self.stats, self.interval = stats, interval
        self._last = time.monotonic()

    def tick(self) -> None:
        if not self.interval:
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        log.info("dsinspect loader: %s", " ".join(f"{k}={v}" for k, v in self.stats.snapshot().items()))
        reason = self.stats.starvation()
        if reason:
            log.warning("dsinspect loader: %s", reason)
