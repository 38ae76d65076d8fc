"""No pickle or eval on any read path, names that cannot escape the catalog root, a loopback-only
web app. (Sample text is escaped in the browser: tests/test_web_browser.py.) The tokenizer-blob commands
run in this process (tests/cli_inprocess.py), `verify --engine pool` in a real one (its workers)."""

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_inprocess import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

import dsinspect
from dsinspect.errors import DsinspectError, UserError
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.store.address import check_name, parse_address
from dsinspect.loaders.store.catalog import Catalog

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
            elif (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                  and (f.value.id, f.attr) in UNSAFE_ATTRS):
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
    from dsinspect.loaders.read.cache import ShardCache
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
        catalog.layout.dataset(name)
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


# -- every name that becomes a path: content addresses, blob endings, run records, exports, sources ----

# Beyond the dataset-name list: traversal through a content address, near-misses of a sha256.
PATH_NAMES = HOSTILE_NAMES + ["../../../../outside/secret", "a" * 64 + "/../x", "../" + "a" * 64, "A" * 64,
                              "0" * 63, "0" * 65, "0" * 64 + "\n", "0" * 64 + "/", "/" + "0" * 64, "./" + "0" * 64,
                              "x/../" + "0" * 64, "x/..", "..\\x", "x\\..\\..\\y"]
ESCAPING = {n for n in PATH_NAMES if n.startswith(("/", "~")) or "\\" in n or ":" in n or "\0" in n or "%" in n
            or any(part in (".", "..") for part in n.split("/"))}
SHA = "c1e2f848219b4f224dd42f7596f8d965ba87e462ebc75d927d471321f3708277"  # demo-text's tokenizer blob


def _inside(path: str, root: str) -> bool:
    path = str(path)
    return ("\\" not in path and "://" not in path.replace("file://", "", 1)
            and os.path.normpath(path).startswith(os.path.normpath(root) + os.sep))


def _plain_ending(name: str) -> bool:
    return re.fullmatch(r"(\.[a-z0-9]{1,16})?", name) is not None


def _refused(fn, *errors) -> bool:
    try:
        fn()
    except (errors or (DsinspectError,)):  # noqa: B030 (either way a tuple of exception classes)
        return True
    return False


def copy_json(data):
    return json.loads(json.dumps(data))


def _manifest_json(version) -> dict:
    return json.loads(version.catalog.fs.cat_file(version.catalog.layout.manifest(version.name, version.id)))


@pytest.fixture(scope="module")
def text_catalog(tmp_path_factory):
    """demo-text alone in a fresh catalog (the bundled one is never touched)."""
    import shutil

    from dsinspect.defaults import BUNDLED
    root = tmp_path_factory.mktemp("pathnames") / "catalog"
    shutil.copytree(BUNDLED / "datasets" / "demo-text", root / "datasets" / "demo-text")
    return Catalog(str(root))


@pytest.mark.parametrize("name", PATH_NAMES)
def test_every_content_address_place_refuses_a_hostile_name(text_catalog, name, tmp_path):
    """Shards, manifests, blobs (sha256 and file ending) and the node-local cache: each place that
    turns a content address into a path refuses anything but 64 lowercase hex digits, at parse time
    (a manifest naming it) and at the path-building boundary (code handing one in directly)."""
    from dsinspect.errors import ManifestError
    from dsinspect.loaders.format.manifest import Field, Manifest, Shard
    from dsinspect.loaders.read.cache import ShardCache

    catalog, v1 = text_catalog, text_catalog.resolve("demo-text@v1")
    data = _manifest_json(v1)
    shard_bad = copy_json(data)
    shard_bad["shards"][0]["sha256"] = name
    blob_bad = copy_json(data)
    blob_bad["schema"]["fields"][3]["options"]["tokenizer"]["blob"] = name
    nested_bad = copy_json(data)
    nested_bad["schema"]["fields"][0]["options"] = {"vocab": [{"blob": name}]}
    tokens = v1.manifest.field("tokens")
    cache = ShardCache(tmp_path / "cache")
    places = {
        "manifest shards[].sha256": lambda: Manifest.from_json(shard_bad, "m.json"),
        "manifest tokenizer blob": lambda: Manifest.from_json(blob_bad, "m.json"),
        "manifest nested blob option": lambda: Manifest.from_json(nested_bad, "m.json"),
        "Shard()": lambda: Shard(name, 1, 1),
        "Field(options)": lambda: Field("tokens", tokens.type, "tokens", options={"tokenizer": {"kind": "huggingface",
                                                                                                "blob": name}}),
        "Layout.shard": lambda: catalog.layout.shard("demo-text", name),
        "Layout.manifest": lambda: catalog.layout.manifest("demo-text", name),
        "Catalog.manifest": lambda: catalog.manifest("demo-text", name),
        "Layout.blob sha256": lambda: catalog.layout.blob("demo-text", name, ".json"),
        "Layout.blob ending": lambda: catalog.layout.blob("demo-text", SHA, name),
        "Catalog.read_blob": lambda: catalog.read_blob("demo-text", name, ".json"),
        "Catalog.put_blob ending": lambda: catalog.put_blob("demo-text", b"{}", name),
        "ShardCache.holds": lambda: cache.holds(name),
    }
    if _plain_ending(name):  # a valid file ending ('', '.hidden')
        places.pop("Layout.blob ending")
        places.pop("Catalog.put_blob ending")
    accepted = [where for where, fn in places.items() if not _refused(fn)]
    assert accepted == []
    with pytest.raises(ManifestError, match=r"m\.json: schema\.fields\[3\]: .*options\.tokenizer\.blob"):
        Manifest.from_json(blob_bad, "m.json")
    assert not any((tmp_path / "cache").iterdir())
    assert [p.name for p in Path(catalog.root).parent.iterdir()] == ["catalog"]  # nothing written beside it


@pytest.mark.parametrize("name", PATH_NAMES)
def test_run_specs_refuse_hostile_source_names_and_version_ids(name):
    """A run spec is a user's file (`replay --spec`, `?spec=`, run records): its dataset name and
    version id become catalog paths, so a bad one is refused when the spec is read (exit 2), naming
    the file and the field."""
    catalog = dsinspect.open_catalog()
    data = RunSpec.create(catalog, "demo-text@v1", seed=0, batch_size=4).to_json()
    for key, what in (("name", "dataset name"), ("version", "version id")):
        if key == "name" and not _refused(lambda: check_name(name)):
            continue  # 'AAAA…' is a fine dataset name
        bad = copy_json(data)
        bad["order"]["sources"][0][key] = name
        bad.pop("order_hash")
        with pytest.raises(UserError, match=rf"^runs/x\.json: bad order\.sources\[0\]\.{key} \({what}\)"):
            RunSpec.from_json(bad, "runs/x.json")


@pytest.mark.parametrize("name", PATH_NAMES)
def test_export_sidecars_refuse_hostile_blob_names(tmp_path, name):
    """Re-ingesting an export copies its side files into the catalog under names its sidecar gives:
    a sha256 and a file ending. Neither may name another file (read, or written into the catalog)."""
    from dsinspect.loaders.ingest.export import read_exported_blobs

    (tmp_path / "_blobs").mkdir()
    (tmp_path / "_blobs" / ("0" * 64)).write_bytes(b"{}")
    for blob in ({"sha256": name, "ext": ".json"}, {"sha256": "0" * 64, "ext": name}):
        if _plain_ending(blob["ext"]):
            continue
        with pytest.raises(UserError, match=r"blobs\[0\]\.(sha256|ext) in .*_dsinspect\.export"):
            list(read_exported_blobs(str(tmp_path), {"blobs": [blob]}))


def test_hostile_field_names_never_leave_a_webdataset_export(tmp_path):
    """Field names are free text, but a WebDataset member is named `<key>.<field>.<ext>`: a field
    name with '/' or '\\' would put members in other directories or outside the one the tar is
    extracted into. Every member of every export stays inside; such a field is refused (exit 2)."""
    import tarfile

    import pyarrow as pa

    from dsinspect.loaders.ingest.export import export_version
    catalog = Catalog(str(tmp_path / "catalog"))
    refused = set()
    for i, name in enumerate(n for n in PATH_NAMES if n and not n.startswith("__dsinspect")):
        fields = [dsinspect.Field("id", pa.int64(), "scalar"), dsinspect.Field(name, pa.string(), "text")]
        version = catalog.write_version(f"wds{i}", [{"id": 1, name: "x"}], fields)
        dest = tmp_path / f"out{i}"
        try:
            export_version(version, "webdataset", str(dest))
        except UserError as e:
            assert "cannot name a WebDataset member" in str(e) and "\n" not in str(e)
            refused.add(name)
            continue
        with tarfile.open(dest / "part-00000.tar") as tar:
            members = tar.getnames()
        assert members and all(_inside(os.path.join(dest, m), str(dest)) for m in members), (name, members)
    assert {n for n in PATH_NAMES if "/" in n or "\\" in n} <= refused
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


@pytest.mark.parametrize("name", PATH_NAMES)
def test_source_listed_file_names_stay_inside_the_source(tmp_path, name):
    """An MDS index.json names its shard files, a Hugging Face state.json its Arrow files and
    dataset_dict.json its splits, relative to their own directory: a name that climbs out (or
    switches filesystem) is refused, so a downloaded dataset cannot make ingest read ~/.ssh."""
    from dsinspect.loaders.ingest.hf import HfSource
    from dsinspect.loaders.ingest.mds import MdsSource
    from dsinspect.loaders.ingest.source import SourceSpec

    mds = tmp_path / "mds"
    mds.mkdir()
    shard = {"format": "mds", "column_names": ["x"], "column_encodings": ["int"], "column_sizes": [8],
             "compression": None, "raw_data": {"basename": name, "bytes": 8}}
    (mds / "index.json").write_text(json.dumps({"version": 2, "shards": [shard]}))
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}))
    hfd = tmp_path / "hfd"
    hfd.mkdir()
    (hfd / "dataset_dict.json").write_text(json.dumps({"splits": [name]}))
    places = {
        "MDS shard basename": (lambda: MdsSource(SourceSpec("mds", str(mds))).parts()[0].url, mds),
        "HF data file name": (lambda: HfSource(SourceSpec("hf", str(hf))).files[0].url, hf),
        "HF split name": (lambda: HfSource(SourceSpec("hf", str(hfd), {"split": name}))._root, hfd),
    }
    for where, (fn, root) in places.items():
        what = {"MDS shard basename": "shard basename in", "HF data file name": "data file name in",
                "HF split name": "split name in"}[where]
        try:
            path = fn()
        except DsinspectError as e:
            assert name not in ESCAPING or f"bad {what}" in str(e), (where, str(e))
            continue
        assert name not in ESCAPING, (where, path)
        assert not path or _inside(path.replace("file://", ""), str(root)), (where, path)


def test_staging_records_naming_a_file_outside_are_not_trusted(tmp_path):
    """A resumed ingest trusts a part's staging record only if every shard it names exists: a record
    whose shard sha256 climbs out of the catalog names no shard, whatever exists out there."""
    from dsinspect.loaders.ingest.engine import load_record

    catalog = Catalog(str(tmp_path / "catalog"))
    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"not ours")
    record = tmp_path / "catalog" / "datasets" / "d" / "ingest" / "job" / "part-00000.json"
    record.parent.mkdir(parents=True)
    (tmp_path / "catalog" / "datasets" / "d" / "shards").mkdir()
    sha = "../../../../outside"  # shards/<sha>.parquet -> tmp_path/outside.parquet
    record.write_text(json.dumps({"dataset": "d", "shards": [{"sha256": sha, "bytes": 8, "rows": 1}]}))
    assert os.path.exists(os.path.join(str(tmp_path / "catalog" / "datasets" / "d" / "shards"), sha + ".parquet"))
    assert load_record(catalog, str(record)) is None


@pytest.mark.parametrize("name", [n for n in PATH_NAMES if n in ESCAPING or "/" in n or not n])
def test_ingest_staging_names_from_a_task_payload_stay_in_the_staging_folder(tmp_path, name):
    """A part's task names its ingest job (process pool, Ray: a JSON payload); the job id names the
    staging folder, so it must be one plain file name."""
    from dsinspect.loaders.ingest.engine import record_path, staging_dir

    catalog = Catalog(str(tmp_path / "catalog"))
    with pytest.raises(UserError, match="bad ingest job id"):
        staging_dir(catalog, "d", name)
    with pytest.raises(UserError, match="bad ingest job id"):
        record_path(catalog, "d", name, 0)


@pytest.mark.parametrize("name", PATH_NAMES)
def test_run_record_names_from_a_link_are_looked_up_never_joined(tmp_path, name):
    """The web app's `?run=NAME` (and its `log=`) names a folder of the runs directory's listing."""
    from dsinspect.loaders.records.recorder import RunRecorder
    from dsinspect.web.models.runs_dir import run_path

    (tmp_path / "runs" / "ok" / "specs").mkdir(parents=True)
    with pytest.raises(UserError):
        run_path(str(tmp_path / "runs"), name)
    with pytest.raises(UserError):
        RunRecorder(str(tmp_path / "rec"), name)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.text(st.sampled_from("af09._-/\\:%@~ \0\néаｄ"), max_size=140) | st.text(max_size=140))
def test_any_accepted_relative_name_or_address_maps_strictly_under_its_directory(name):
    from dsinspect.loaders.format.pathnames import check_component, check_ext, check_relative, check_sha256
    root = "/srv/catalog/x"
    for check in (check_relative, check_component):
        try:
            check(name, "name")
        except UserError:
            continue
        assert _inside(os.path.join(root, name), root) and os.path.normpath(os.path.join(root, name)).endswith(name)
    for check in (check_sha256, check_ext):
        try:
            check(name, "name")
        except UserError:
            continue
        assert "/" not in name and "." not in name.lstrip(".") and name.isascii() and name.isprintable()


# -- the tokenizer-blob traversal, end to end (issue #14) ------------------------------------------

def _hostile_text_version(root: Path, blob: str) -> str:
    """A demo-text version whose tokenizer blob is `blob`, properly content-addressed (its file name
    is the sha256 of its canonical content), so only the name check can refuse it; its id."""
    import hashlib
    versions = root / "datasets" / "demo-text" / "versions"
    data = json.loads(next(versions.glob("*.json")).read_text())
    data["schema"]["fields"][3]["options"]["tokenizer"]["blob"] = blob
    content = {k: v for k, v in data.items() if k != "meta"}
    vid = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                    allow_nan=False).encode()).hexdigest()
    (versions / f"{vid}.json").write_text(json.dumps(data, indent=2, sort_keys=True))
    return vid


@pytest.mark.parametrize("command", [["verify", "{addr}"], ["verify", "{addr}", "--engine", "pool", "--workers", "1"],
                                     ["export", "{addr}", "{dest}", "--format", "parquet"],
                                     ["show", "{addr}:0", "--field", "tokens"]])
def test_a_tokenizer_blob_that_climbs_out_is_a_failed_check_and_no_outside_file_is_read(tmp_path, command):
    import hashlib
    import shutil

    from dsinspect.defaults import BUNDLED
    root = tmp_path / "catalog"
    shutil.copytree(BUNDLED / "datasets" / "demo-text", root / "datasets" / "demo-text")
    secret = tmp_path / "outside" / "secret.json"  # blobs/../../../../outside/secret + ".json"
    secret.parent.mkdir()
    secret.write_bytes(b'{"api_key": "hunter2"}\n')
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    vid = _hostile_text_version(root, "../../../../outside/secret")
    dest = tmp_path / "export"
    argv = [a.format(addr=f"demo-text@{vid[:16]}", dest=dest) for a in command]
    unset = ("DSINSPECT_CATALOG", "DSINSPECT_INJECT_FAULTS")
    if "pool" in argv:  # a real process: its worker processes, and exit 1 as a shell sees it
        env = {k: v for k, v in os.environ.items() if k not in unset}
        done = subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", str(root), *argv], capture_output=True,
                              text=True, env=env, timeout=180)
    else:  # in this process (tests/cli_inprocess.py)
        done = run_cli("--catalog", root, *argv, unset=unset)
    assert digest not in done.stdout + done.stderr and digest[:16] not in done.stdout + done.stderr
    assert done.returncode == 1, (done.stdout, done.stderr)  # a stored manifest failing its check
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsinspect: error: "), done.stderr
    assert f"{vid}.json" in lines[0] and "schema.fields[3]" in lines[0] and "options.tokenizer.blob" in lines[0]
    assert not dest.exists()
