"""Names of code (`module:function`) resolved with pkgutil.resolve_name: each site keeps its own error
for a bad name (transforms, compute tasks, source openers, source kinds)."""

import pkgutil

import pytest

from dsinspect.errors import UserError
from dsinspect.loaders.compute.tasks import call_task
from dsinspect.loaders.ingest.engine import open_with
from dsinspect.loaders.ingest.sources import KINDS
from dsinspect.loaders.records.transforms import load_transform


def test_a_transform_name_that_is_no_python_name_is_refused_before_any_import():
    for bad in ("my-job:f", "job:", ":f", "job:f()", ".job:f"):
        with pytest.raises(UserError, match="expected package.module:function"):
            load_transform(bad)
    assert load_transform("json:dumps")({"a": 1}) == '{"a": 1}'


def test_a_module_that_fails_on_import_shows_its_own_error(tmp_path, monkeypatch):
    (tmp_path / "broken_job_xyz.py").write_text("raise AttributeError('a bug at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AttributeError, match="a bug at import"):
        load_transform("broken_job_xyz:f")


def test_a_task_with_a_bad_name_fails_like_any_failed_task():
    with pytest.raises(AttributeError):
        call_task("dsinspect.errors:no_such_task", {})
    with pytest.raises(ImportError):
        call_task("no_such_module_xyz:task", {})


@pytest.mark.parametrize("name", ["no_such_module_xyz:open", "json:no_such_opener", "json", "my-mod:f"])
def test_a_bad_source_opener_is_one_line(name):
    with pytest.raises(UserError, match=f"cannot load the source reader '{name}'"):
        open_with(name)


def test_every_source_kind_names_a_reader():
    for kind, name in KINDS.items():
        assert isinstance(pkgutil.resolve_name(name), type), kind
