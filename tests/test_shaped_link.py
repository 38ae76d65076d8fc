"""The shaped link of the remote read benchmark (benchmarks/shaped_link.py): its timing rules on a
fake clock (bandwidth and bursts of the token bucket, propagation before the bucket), and real S3
requests through it arriving byte for byte. No test here measures time."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

from shaped_link import ShapedLink, TokenBucket, departure  # noqa: E402


def test_the_bucket_lets_a_burst_through_then_paces_at_the_rate():
    bucket = TokenBucket(rate=100.0, burst=50.0)
    assert bucket.take(50, 0.0) == 0.0  # the burst goes at once
    assert bucket.take(50, 0.0) == pytest.approx(0.5)  # then 100 bytes/s
    assert bucket.take(10, 0.5) == pytest.approx(0.6)
    assert bucket.take(10, 10.0) == 10.0  # idle long enough: a burst again, never more than `burst`
    assert bucket.take(50, 10.0) == pytest.approx(10.1)


def test_bookings_share_the_rate_in_call_order_whoever_makes_them():
    bucket = TokenBucket(rate=1000.0, burst=100.0)
    times = [bucket.take(100, 0.0) for _ in range(11)]  # e.g. eleven connections at once
    assert times == pytest.approx([0.1 * k for k in range(11)])  # the burst, then exactly the rate


def test_a_chunk_waits_for_its_propagation_delay_then_for_the_bucket():
    assert departure(arrived=1.0, now=1.0, delay=0.04, bucket=None, n=10) == pytest.approx(1.04)
    assert departure(arrived=1.0, now=2.0, delay=0.04, bucket=None, n=10) == 2.0  # late already: now
    bucket = TokenBucket(rate=100.0, burst=10.0)
    assert departure(1.0, 1.0, 0.04, bucket, 10) == pytest.approx(1.04)
    assert departure(1.0, 1.0, 0.04, bucket, 10) == pytest.approx(1.14)  # booked at 1.04: 10 bytes owed


@pytest.mark.parametrize("rtt, rate", [(0.0, None), (0.004, 20e6)])
def test_s3_requests_through_the_link_arrive_byte_for_byte(rtt, rate):
    pytest.importorskip("moto")
    import fsspec
    from s3_server import S3Server, s3_environment

    payload = os.urandom(3 << 20)
    with S3Server() as server, s3_environment(server) as env, \
            ShapedLink(("127.0.0.1", server.port), rtt=rtt, rate=rate) as link:
        fs = fsspec.filesystem("s3", **json.loads(env["FSSPEC_S3"]))
        fs.mkdir(server.bucket)
        fs.pipe(f"{server.bucket}/blob", payload)
        options = {**json.loads(env["FSSPEC_S3"]), "endpoint_url": f"http://127.0.0.1:{link.port}"}
        shaped = fsspec.filesystem("s3", skip_instance_cache=True, **options)
        assert shaped.cat_file(f"{server.bucket}/blob") == payload
        assert shaped.cat_file(f"{server.bucket}/blob", start=1000, end=200_000) == payload[1000:200_000]
        assert link.stats.bytes_down >= len(payload) + 199_000  # every byte crossed the link
        assert link.stats.connections >= 1
