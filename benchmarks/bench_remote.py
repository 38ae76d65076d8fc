"""The remote read benchmark's link, measured before any reader (issue #18): moto's S3 server on
loopback, behind the shaped link of shaped_link.py, read with s3fs.

  python benchmarks/bench_remote.py [--mib 64] [--rate-mbit 400]

For the server alone and for each link (RTT 0, 20, 80 ms at the given rate, and RTT 0 unlimited):
one whole-object GET, and the object as 8 ranged GETs in flight at once, each the median of 3.
Printed as MB/s and as a fraction of the link's rate, with the load average, and written to
benchmarks/results/remote-link-<date>.json. What it shows: whether the link, not the server or the
proxy, is what limits a reader (the server's ceiling above the link's rate), and what one stream
gets at each RTT (its TCP window over the delay) against streams in parallel.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # the tests' S3 server (moto behind a request log)

from shaped_link import ShapedLink  # noqa: E402

REPEATS = 3
PARALLEL = 8


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(fs, path: str, size: int) -> dict:
    """MB/s of one whole GET and of PARALLEL ranged GETs at once (medians of REPEATS)."""
    step = -(-size // PARALLEL)
    ranges = [(a, min(size, a + step)) for a in range(0, size, step)]

    def whole():
        assert len(fs.cat_file(path)) == size

    def ranged():
        with ThreadPoolExecutor(PARALLEL) as pool:
            got = list(pool.map(lambda r: len(fs.cat_file(path, start=r[0], end=r[1])), ranges))
        assert sum(got) == size

    one = statistics.median(_timed(whole) for _ in range(REPEATS))
    many = statistics.median(_timed(ranged) for _ in range(REPEATS))
    return {"one_stream_mb_s": round(size / one / 1e6, 1), f"{PARALLEL}_streams_mb_s": round(size / many / 1e6, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the object read")
    parser.add_argument("--rate-mbit", type=float, default=400.0, help="the shaped link's bandwidth")
    args = parser.parse_args()

    import fsspec
    from s3_server import S3Server, s3_environment

    size, rate = args.mib << 20, args.rate_mbit * 1e6 / 8
    links = [("server alone", None), ("link: RTT 0, unlimited", (0.0, None))]
    links += [(f"link: RTT {int(rtt * 1e3)} ms, {args.rate_mbit:g} Mbit/s", (rtt, rate)) for rtt in (0.0, 0.020, 0.080)]
    rows = []
    load_start = os.getloadavg()[0]
    with S3Server() as server, s3_environment(server) as env:
        options = json.loads(env["FSSPEC_S3"])
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir(server.bucket)
        path = f"{server.bucket}/blob"
        fs.pipe(path, os.urandom(size))
        for name, link in links:
            if link is None:
                figures = measure(fsspec.filesystem("s3", skip_instance_cache=True, **options), path, size)
            else:
                with ShapedLink(("127.0.0.1", server.port), rtt=link[0], rate=link[1]) as shaped:
                    fs_link = fsspec.filesystem("s3", skip_instance_cache=True,
                                                **{**options, "endpoint_url": f"http://127.0.0.1:{shaped.port}"})
                    figures = measure(fs_link, path, size)
            row = {"link": name, "rtt_ms": None if link is None else link[0] * 1e3,
                   "rate_mb_s": None if link is None or link[1] is None else round(link[1] / 1e6, 1),
                   **figures, "load": round(os.getloadavg()[0], 2)}
            rows.append(row)
            many = row[f"{PARALLEL}_streams_mb_s"]
            share = "" if not row["rate_mb_s"] else \
                f"  ({row['one_stream_mb_s'] / row['rate_mb_s']:.0%} / {many / row['rate_mb_s']:.0%} of the link)"
            print(f"{name:<32} one stream {row['one_stream_mb_s']:>7.1f} MB/s   {PARALLEL} streams "
                  f"{many:>7.1f} MB/s{share}  [load {row['load']}]", flush=True)
    out = HERE / "results" / f"remote-link-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps({"object_bytes": size, "repeats": REPEATS, "parallel": PARALLEL,
                               "load_start": load_start, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
