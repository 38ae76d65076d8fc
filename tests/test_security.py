"""No pickle or eval on any read path, names that cannot escape the catalog root, a loopback-only
web app. (Sample text is escaped in the browser: tests/test_web_browser.py.)"""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dsinspect
from dsinspect.errors import DsinspectError, UserError
from dsinspect.loaders.address import check_name, parse_address
from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.spec import RunSpec

PACKAGE = Path(dsinspect.__file__).parent
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}
UNSAFE_ATTRS = {("torch", "load"), ("yaml", "load"), ("yaml", "unsafe_load"), ("yaml", "full_load"),
                ("pd", "read_pickle"), ("pandas", "read_pickle"), ("np", "load"), ("numpy", "load")}
ALLOWED: dict[tuple[str, str], str] = {
    # (module path relative to the package, what) -> why it is safe. Empty: nothing needs an exception.
}


def _unsafe_uses(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, f"import {a.name}") for a in node.names if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES:
            found.append((node.module, f"from {node.module} import"))
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in UNSAFE_CALLS:
                found.append((f.id, f"{f.id}()"))
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in UNSAFE_ATTRS:
                safe_loader = any(k.arg == "Loader" and "Safe" in ast.unparse(k.value) for k in node.keywords)
                numpy_safe = f.attr == "load" and f.value.id in ("np", "numpy") and not any(
                    k.arg == "allow_pickle" and ast.unparse(k.value) != "False" for k in node.keywords)
                if not (safe_loader or numpy_safe):
                    found.append((f"{f.value.id}.{f.attr}", f"{f.value.id}.{f.attr}()"))
    return found


def test_scanner_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle\nfrom marshal import loads\neval('1')\ntorch.load(f)\nnp.load(f, allow_pickle=True)\n"
                   "yaml.load(s)\nyaml.load(s, Loader=yaml.SafeLoader)\nnp.load(f)\n")
    assert [w for _, w in _unsafe_uses(bad)] == ["import pickle", "from marshal import", "eval()", "torch.load()",
                                                 "np.load()", "yaml.load()"]


def test_no_pickle_eval_or_unsafe_loaders_in_the_package():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    hits = [(str(p.relative_to(PACKAGE)), what) for p in files for _, what in _unsafe_uses(p)]
    assert [h for h in hits if h not in ALLOWED] == []


HOOK = textwrap.dedent("""
    import importlib, json, marshal, pickle, pkgutil, sys
    import dsinspect
    from dsinspect.inspect import sample as _sample  # the inspect core and its media libraries, imported up front
    for m in pkgutil.walk_packages(dsinspect.loaders.__path__, "dsinspect.loaders."):
        if not m.name.endswith("pytorch"):
            importlib.import_module(m.name)
    calls = []

    def spy(name, real):
        def wrapper(*a, **k):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not caller.startswith("importlib"):  # the import system reads .pyc files with marshal
                calls.append(f"{name} from {caller}")
            return real(*a, **k)
        return wrapper

    for mod, names in ((pickle, ("loads", "load", "Unpickler")), (marshal, ("loads", "load"))):
        for n in names:
            setattr(mod, n, spy(f"{mod.__name__}.{n}", getattr(mod, n)))
    import _pickle
    for n in ("loads", "load", "Unpickler"):
        setattr(_pickle, n, spy(f"_pickle.{n}", getattr(_pickle, n)))

    from dsinspect.inspect.sample import open_sample
    from dsinspect.loaders.cache import ShardCache
    catalog = dsinspect.open_catalog()
    views = rows = 0
    for name in catalog.datasets():
        for vid in catalog.version_ids(name):
            version = catalog.version(name, vid)
            for i in range(version.num_rows):
                version.row(i)
                sample = open_sample(version, i)
                for f in version.fields:
                    sample.view(f.name)
                    views += 1
                json.dumps(sample.to_json())
                rows += 1
            dsinspect.verify_version(version)
    spec = dsinspect.RunSpec.create(catalog, "demo-text@v1", seed=1, batch_size=8, world_size=2, shuffle="global")
    with dsinspect.Loader(spec, rank=1, catalog=catalog, cache=ShardCache(sys.argv[1])) as loader:
        batches = [b for b in loader]
    state = loader.state_dict()
    dsinspect.LoaderState.from_json(json.loads(json.dumps(state)))
    replayed = dsinspect.replay(spec, step=1, rank=1, catalog=catalog)
    changes = dsinspect.diff("demo-text@v1", "demo-text@v2", catalog=catalog)
    for address in ("demo-images@v1:3", "demo-video@v2:0", "demo-rl:-1"):
        catalog.resolve(address.rsplit(":", 1)[0])
    read_path_calls = list(calls)
    pickle.loads(pickle.dumps(0))  # canary: the spy does see a call
    print(json.dumps({"calls": read_path_calls, "canary": len(calls) > len(read_path_calls), "views": views,
                      "rows": rows, "batches": len(batches)}))
""")


@pytest.mark.slow
def test_the_read_path_never_unpickles(tmp_path):
    """Every read path in one process with pickle/marshal spied on: zero calls. Not covered, by
    design: a PyTorch DataLoader with workers sends our batches from worker to main process over
    torch's own multiprocessing channel (which pickles); that is torch's IPC between processes of
    one job, carrying tensors we built, not a read of stored data."""
    env = {k: v for k, v in os.environ.items() if k not in ("DSINSPECT_CATALOG", "DSINSPECT_INJECT_FAULTS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE.parent), env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", HOOK, str(tmp_path / "cache")], capture_output=True, text=True,
                         env=env, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["calls"] == [] and result["canary"]
    assert result["rows"] >= 20 and result["views"] >= 4 * result["rows"] // 2 and result["batches"] > 0


# -- names and addresses cannot escape the catalog root ----------------------------------------------

HOSTILE_NAMES = ["..", ".", "../x", "a/../../b", "/abs", "/etc/passwd", "C:\\x", "C:", "a\\b", "s3://bucket/x",
                 "file:///etc", "file:x", "%2e%2e", "%2F", "a\0b", "\0", "", " ", "a b", "x" * 129, "é", "ｄemo",
                 "dеmo", "demo\n", "demo\r", "-rf", ".hidden", "_x", "a/b", "~", "~root", "a:b", "a@b", "\u202edemo"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_refused_everywhere(tmp_path, name):
    catalog = Catalog(str(tmp_path / "catalog"))
    with pytest.raises(UserError, match="bad"):
        check_name(name)
    with pytest.raises(UserError):
        catalog.dataset_dir(name)
    with pytest.raises(UserError):
        catalog.write_version(name, [{"x": 1}], [dsinspect.Field("x", __import__("pyarrow").int64(), "scalar")])
    with pytest.raises(UserError):
        catalog.set_tag("demo", name, "0" * 64)
    with pytest.raises(DsinspectError):
        parse_address(f"{name}@v1:0")
    with pytest.raises(DsinspectError):
        parse_address(f"demo@{name}:0")
    assert not (tmp_path / "catalog").exists() or not any((tmp_path / "catalog").rglob("*.parquet"))


def test_hostile_names_in_run_specs_and_blobs_are_refused(tmp_path):
    catalog = dsinspect.open_catalog()
    spec = RunSpec.create(catalog, "demo-text@v1", seed=0, batch_size=4)
    for name in ("../demo-text", "/abs", "s3://x", "%2e%2e", "demo-text\n"):
        data = spec.to_json()
        data["order"]["sources"][0]["name"] = name
        with pytest.raises(DsinspectError):
            dsinspect.Loader(RunSpec.from_json(data), catalog=catalog)
    for blob in ("../../x", "/etc/passwd", "a" * 64 + "/..", "s3://x"):
        with pytest.raises(DsinspectError):
            catalog.read_blob("demo-text", blob, ".json")


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.text(st.sampled_from("aZ09._-/\\:%@~ \0\néаｄ"), max_size=140) | st.text(max_size=140))
def test_any_accepted_name_maps_strictly_under_the_catalog_root(name):
    root = "/srv/catalog"
    try:
        check_name(name)
    except UserError:
        return
    path = os.path.normpath(os.path.join(root, "datasets", name))
    assert os.path.dirname(path) == root + "/datasets" and os.path.basename(path) == name
    assert name not in (".", "..") and "/" not in name and "\\" not in name and ":" not in name


# -- the web app binds to loopback only ----------------------------------------------------------------

def test_web_command_binds_loopback_and_sends_no_usage_stats():
    from dsinspect.cli.web_cmd import streamlit_command
    argv = streamlit_command(8599)
    pairs = dict(zip(argv, argv[1:]))
    assert pairs["--server.address"] == "127.0.0.1"
    assert pairs["--browser.gatherUsageStats"] == "false"
    assert pairs["--server.headless"] == "true"
    assert not any(a in ("0.0.0.0", "::", "--server.enableCORS") for a in argv)
