import os
import tempfile
import uuid

import pyarrow as pa
import pytest

from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.manifest import Field


@pytest.fixture(params=["local", "memory"])
def catalog(request, tmp_path):
    """An empty catalog on a local directory and on fsspec's memory:// filesystem."""
    if request.param == "local":
        yield Catalog(str(tmp_path / "catalog"))
        return
    cat = Catalog(f"memory://dsinspect-test-{uuid.uuid4().hex}")
    yield cat
    if cat.fs.exists(cat.root):
        cat.fs.rm(cat.root, recursive=True)


TOY_FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens"),
              Field("blob", pa.binary(), "bytes")]


def toy_rows(n, start=0):
    return [{"id": i, "tokens": list(range(i % 5)), "blob": bytes([i % 251]) * (i % 7)} for i in range(start, start + n)]


def pytest_configure(config):
    """Tests (and the processes they start) use a private shard cache, never the user's."""
    if "DSINSPECT_CACHE" not in os.environ or not os.environ["DSINSPECT_CACHE"].startswith(tempfile.gettempdir()):
        os.environ["DSINSPECT_CACHE"] = tempfile.mkdtemp(prefix="dsinspect-test-cache-")
