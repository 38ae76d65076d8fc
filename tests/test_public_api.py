"""The public API, pinned: adding or removing a public name is a decision, made here as well.

Public: the package root, `dsinspect.errors`, the engine's `dsinspect.loaders` and its `pytorch`, `jax`,
`grain`, `hf`, `raydata`, `ingest` and `diff` packages, and `dsinspect.inspect`. The engine's other
folders are internal: their `__init__` exports nothing, and their modules may change without notice."""

from __future__ import annotations

import importlib
import types

import pytest

PUBLIC = {
    "dsinspect": [
        "__version__", "open_catalog", "Catalog", "DatasetVersion", "Field", "Role", "WriteOptions", "derive_version",
        "verify_version", "parse_address", "RunSpec", "Loader", "LoaderState", "Batch", "batch_indices", "replay",
        "diff", "DsinspectError", "UserError", "NotFoundError", "StorageError", "IntegrityError",
    ],
    "dsinspect.loaders": [
        "Catalog", "DatasetVersion", "Field", "Role", "Manifest", "HASH_COLUMN", "WriteOptions", "derive_version",
        "verify_version", "parse_address", "RunSpec", "Shuffle", "LastBatch", "Source", "Start", "LoaderState",
        "Loader", "Batch", "batch_indices", "plan_batch", "epoch_order", "steps_in_epoch", "check_states",
        "read_run", "RunRecord", "ShardCache", "SequenceSpec", "PackedRun", "packed_run",
        "PackedLoader", "PackedBatch",
    ],
    "dsinspect.loaders.pytorch": ["PackedTorchLoader", "TorchBatches", "TorchLoader", "batch_to_torch",
                                  "packed_to_torch"],
    "dsinspect.loaders.jax": ["JaxBatches", "PackedJaxBatches"],
    "dsinspect.loaders.grain": ["PackedStepSource", "StepSource", "grain_state", "loader_state"],
    "dsinspect.loaders.hf": ["as_dataset", "as_iterable", "resume_state", "push_dataset"],
    "dsinspect.loaders.raydata": ["VersionDatasource", "read_version", "VersionDatasink", "write_version"],
    "dsinspect.loaders.ingest": ["ingest", "run_ingest", "IngestProgress", "IngestResult", "convert_part",
                                 "export_version"],
    "dsinspect.loaders.diff": ["diff", "VersionDiff", "SchemaChange", "ShardChanges", "RowChanges"],
}
INTERNAL = ["format", "compute", "store", "order", "records", "read", "audit"]


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_public_names_are_pinned(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PUBLIC[package])
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None, name


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_nothing_public_outside_all(package):
    """A name defined or imported at the top of a public package is in __all__ (or private, or a submodule)."""
    module = importlib.import_module(package)
    extra = {n for n, v in vars(module).items() if not n.startswith("_") and n not in module.__all__
             and not isinstance(v, types.ModuleType) and not _typing_aid(n, v)}
    assert extra == set()


def _typing_aid(name, value) -> bool:
    """`from __future__ import annotations`, TYPE_CHECKING and typing's own names are not API."""
    return name in ("annotations", "TYPE_CHECKING") or getattr(value, "__module__", None) == "typing"


def test_the_root_lists_what_it_offers():
    import dsinspect

    assert set(PUBLIC["dsinspect"]) <= set(dir(dsinspect))
    with pytest.raises(AttributeError):
        dsinspect.no_such_name  # noqa: B018


@pytest.mark.parametrize("folder", INTERNAL)
def test_internal_engine_folders_export_nothing(folder):
    module = importlib.import_module(f"dsinspect.loaders.{folder}")
    assert getattr(module, "__all__", []) == []
    assert module.__doc__ and "May import" in module.__doc__  # says what it owns and what it may import
    public = {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public == set()


def test_errors_module():
    errors = importlib.import_module("dsinspect.errors")
    exported = {n for n in errors.__all__}
    defined = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, Exception)
               and v.__module__ == "dsinspect.errors"}
    assert defined <= exported
