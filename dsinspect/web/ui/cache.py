"""The Streamlit caches in front of the models: one catalog handle per URL, cached views per address."""

from __future__ import annotations

from typing import Any

import streamlit as st

from dsinspect.loaders.store.catalog import Catalog
from dsinspect.web.models import catalog as catalogs
from dsinspect.web.models import sample

__all__ = ["catalog", "url", "catalog_rows", "dataset_model", "sample_table", "sample_model", "frame_png", "diff_model",
           "diff_changed_rows", "run_names", "replay_model", "log_check", "run_view", "run_check", "version_query",
           "query_page", "stats_model", "rollout_model", "rollout_index", "group_model", "is_learner", "learner_step",
           "learner_rollout", "learner_check"]


def url() -> str:
    """The configured catalog; nothing a visitor sends can change it."""
    return catalogs.configured_url()


@st.cache_resource(show_spinner=False)
def catalog(catalog_url: str) -> Catalog:
    """A shared handle: Catalog only reads immutable files, so sessions may share it."""
    return Catalog(catalog_url)


@st.cache_data(show_spinner="Reading the catalog…", ttl=30)
def catalog_rows(catalog_url: str) -> list[dict[str, Any]]:
    return catalogs.catalog_rows(catalog(catalog_url))


@st.cache_data(show_spinner="Reading the manifest…", ttl=30)
def dataset_model(catalog_url: str, address: str) -> dict[str, Any]:
    return catalogs.dataset_model(catalog(catalog_url), address)


@st.cache_data(show_spinner="Reading rows…", max_entries=256)
def sample_table(catalog_url: str, address: str, page: int) -> dict[str, Any]:
    return catalogs.sample_table(catalog(catalog_url), address, page)


# few entries: a sample holds its raw values whole (a 10 MB string costs ~50 MB here with its views)
@st.cache_data(show_spinner="Reading and decoding the sample…", max_entries=16)
def sample_model(catalog_url: str, address: str) -> sample.SampleModel:
    return sample.sample_model(catalog(catalog_url), address)


# rollouts by version id (immutable): a rollout and its group's check, a key looked up, a group side by side
@st.cache_data(show_spinner="Reading the rollout and checking its group…", max_entries=64)
def rollout_model(catalog_url: str, version_address: str, index: int) -> Any:
    """Row `index` of `version_address` (NAME@FULL_ID) as a RolloutView, None when it is not rollouts."""
    from dsinspect.web.models import rollout

    return rollout.rollout_at(catalog(catalog_url), version_address, index)


@st.cache_data(show_spinner="Finding the rollout…", max_entries=256)
def rollout_index(catalog_url: str, version_address: str, rollout_id: str) -> int:
    from dsinspect.web.models import rollout

    return rollout.rollout_index(catalog(catalog_url), version_address, rollout_id)


@st.cache_data(show_spinner="Reading the group and checking it…", max_entries=32)
def group_model(catalog_url: str, version_address: str, group: str) -> Any:
    """Group `group` of `version_address` (NAME@FULL_ID) as a GroupView."""
    from dsinspect.web.models import rollout

    return rollout.group_at(catalog(catalog_url), version_address, group)


@st.cache_data(show_spinner="Decoding the frame…", max_entries=256)
def frame_png(catalog_url: str, address: str, field: str, index: int) -> tuple[bytes | None, str]:
    return sample.frame_png(catalog(catalog_url), address, field, index)


# a resource: one query view per version id (its DuckDB connections and in-memory columns), shared
# by sessions; a version id names immutable data, so an entry never goes stale
@st.cache_resource(show_spinner="Preparing the version's query view…", max_entries=8)
def version_query(catalog_url: str, version_address: str) -> Any:
    """The SharedQuery of `version_address` (NAME@FULL_ID)."""
    from dsinspect.web.models import query

    return query.SharedQuery(catalog(catalog_url).resolve(version_address))


@st.cache_data(show_spinner="Running the query…", max_entries=256)
def query_page(catalog_url: str, version_address: str, where: str, page: int, page_size: int) -> dict[str, Any]:
    """One page of the rows of `version_address` (NAME@FULL_ID) matching `where`."""
    return version_query(catalog_url, version_address).page(where, page, page_size)


@st.cache_data(show_spinner="Computing the statistics…", max_entries=64)
def stats_model(catalog_url: str, a: str, b: str = "") -> dict[str, Any]:
    """The statistics of `a` (NAME@FULL_ID), or of `a` and `b` side by side on the same bins."""
    from dsinspect.web.models import stats

    return stats.stats_model(version_query(catalog_url, a), version_query(catalog_url, b) if b else None)


def run_names(catalog_url: str) -> list[str]:
    from dsinspect.web.models import runs_dir

    return _run_names(runs_dir.runs_url(catalog_url))


@st.cache_data(show_spinner="Listing run records…", ttl=30)
def _run_names(runs_url: str) -> list[str]:  # keyed by the runs directory itself, whoever configured it
    from dsinspect.web.models import runs_dir

    return runs_dir.run_names(runs_url)


# a resource, not data: the record's lines stay in memory once, shared by sessions (it is only read);
# few entries and a short life, since a run record grows while its job runs
def run_view(catalog_url: str, name: str) -> Any:
    """The run record `name` of the runs directory (by its listed name only), read once."""
    from dsinspect.web.models import runs_dir

    return _run_view(runs_dir.runs_url(catalog_url), name)


@st.cache_resource(show_spinner="Reading the run record…", ttl=30, max_entries=8)
def _run_view(runs_url: str, name: str) -> Any:
    from dsinspect.inspect.runs import open_run
    from dsinspect.web.models import runs_dir

    return open_run(runs_dir.run_path(runs_url, name), name)


@st.cache_data(show_spinner="Checking the run record against the catalog…", max_entries=32, ttl=30)
def run_check(catalog_url: str, name: str, steps: str | None, transform: str = "") -> dict[str, Any]:
    from dsinspect.web.models import run

    return run.check_run(catalog(catalog_url), run_view(catalog_url, name), steps, transform or None)


# a stream learner's record (models/learner.py): read through the run view above, so its lines are read once
def is_learner(catalog_url: str, name: str) -> bool:
    """Whether the run record `name` (listed in the runs directory) is a stream learner's: one look at its folder,
    so a Loader record's Replay page reads nothing more than before."""
    from dsinspect.web.models import runs_dir

    return _is_learner(runs_dir.runs_url(catalog_url), name)


@st.cache_data(show_spinner=False, ttl=30)
def _is_learner(runs_url: str, name: str) -> bool:
    from dsinspect.loaders.stream import is_learner_run
    from dsinspect.web.models import runs_dir

    return is_learner_run(runs_dir.run_path(runs_url, name))


@st.cache_data(show_spinner="Reading the rollouts the step consumed…", max_entries=64, ttl=30)  # a record may grow
def learner_step(catalog_url: str, name: str, step: int, rank: str) -> dict[str, Any]:
    from dsinspect.web.models import learner

    return learner.step_model(catalog(catalog_url), learner.learner_run(run_view(catalog_url, name)), step, rank)


@st.cache_data(show_spinner="Reading the rollout and checking its group…", max_entries=32, ttl=30)
def learner_rollout(catalog_url: str, name: str, step: int, rank: int, slot: int) -> dict[str, Any]:
    from dsinspect.web.models import learner

    return learner.consumed_rollout(catalog(catalog_url), learner.learner_run(run_view(catalog_url, name)), step,
                                    rank, slot)


@st.cache_data(show_spinner="Checking the learner's record against its stream…", max_entries=32, ttl=30)
def learner_check(catalog_url: str, name: str, steps: str | None) -> dict[str, Any]:
    from dsinspect.web.models import learner

    return learner.check_model(catalog(catalog_url), learner.learner_run(run_view(catalog_url, name)), steps)


def _specs(catalog_url: str, spec_text: str, run: str) -> Any:
    """The spec the page names: a run record of the runs directory by name (all its segments), else `?spec=`."""
    from dsinspect.loaders.audit.replay import load_specs
    from dsinspect.web.models import runs_dir

    if run:
        return load_specs(runs_dir.run_path(runs_dir.runs_url(catalog_url), run))
    return spec_text


@st.cache_data(show_spinner="Replaying the batch…", max_entries=64, ttl=30)  # a run record may grow
def replay_model(catalog_url: str, spec_text: str, step: int, rank: str, transform: str = "",
                 run: str = "") -> dict[str, Any]:
    from dsinspect.web.models import replay

    return replay.replay_model(catalog(catalog_url), _specs(catalog_url, spec_text, run), step, rank,
                                   transform or None)


@st.cache_data(show_spinner="Checking the fingerprint log…", max_entries=64, ttl=30)
def log_check(catalog_url: str, spec_text: str, run: str, log_run: str, log_bytes: bytes | None, log_name: str,
              steps: str | None, rank: str, transform: str = "") -> dict[str, Any]:
    """The verdict of a fingerprint log (a run record of the runs directory, by name, or uploaded bytes)."""
    from dsinspect.web.models import replay, runs_dir

    if log_run:
        log: Any = runs_dir.run_path(runs_dir.runs_url(catalog_url), log_run)
    else:
        log = replay.parse_log(log_bytes or b"", log_name or "uploaded log")
    return replay.log_check(catalog(catalog_url), _specs(catalog_url, spec_text, run), log, steps, rank,
                                transform or None)


@st.cache_data(show_spinner="Comparing the versions…", max_entries=64, ttl=30)  # tags may move
def diff_model(catalog_url: str, a: str, b: str) -> dict[str, Any]:
    from dsinspect.web.models import diff

    return diff.diff_model(catalog(catalog_url), a, b)


@st.cache_data(show_spinner="Reading the changed rows…", max_entries=256, ttl=30)
def diff_changed_rows(catalog_url: str, a: str, b: str, page: int) -> list[dict[str, Any]]:
    """One page of the changed rows of `diff_model(a, b)`, before and after side by side."""
    from dsinspect.web.models import diff

    m = diff_model(catalog_url, a, b)
    start = page * diff.CHANGED_PAGE
    # by full version id, so the rows are those of the versions the model compared
    return diff.changed_rows(catalog(catalog_url), f"{m['a']['dataset']}@{m['a']['id']}",
                                 f"{m['b']['dataset']}@{m['b']['id']}",
                                 m["changed"][start:start + diff.CHANGED_PAGE])
