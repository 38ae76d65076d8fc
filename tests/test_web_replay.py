"""The Replay page with the job's transform (each sample as stored and as fed to the model, side by
side) and a fingerprint log (each step marked matching or diverging; the first divergence found),
through streamlit.testing.v1.AppTest, on a real recorded run."""

from __future__ import annotations

import json
import textwrap

import pytest
from replay_diff_fixtures import make_catalog, rewrite_shard, run_job
from web_fixtures import codes, param, plain, run

import dsinspect
from dsinspect.errors import UserError
from dsinspect.web.models import replay

TRANSFORM = textwrap.dedent('''
    import pyarrow as pa
    import pyarrow.compute as pc

    CALLS = []

    def scale(batch):
        CALLS.append(len(batch))
        t = batch.table
        return pa.table({"model_id": pc.multiply(t.column("id"), 1000),
                         "n_tokens": pc.list_value_length(t.column("tokens"))})

    def explode(batch):
        raise ValueError("boom")
''')


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A catalog with a recorded run in its runs/ folder (job1: 5 steps, 2 ranks), and the job's
    transform module importable by name."""
    (tmp_path / "webjob_xform.py").write_text(TRANSFORM)
    monkeypatch.syspath_prepend(str(tmp_path))
    cat = make_catalog(tmp_path / "cat")
    spec = dsinspect.RunSpec.create(cat, "toy", batch_size=4, world_size=2, shuffle="global", seed=3)
    seen = run_job(cat, spec, 5, str(tmp_path / "cat" / "runs" / "job1"))
    monkeypatch.setenv("DSINSPECT_CATALOG", str(tmp_path / "cat"))
    monkeypatch.delenv("DSINSPECT_RUNS", raising=False)
    monkeypatch.delenv("DSINSPECT_WEB_TRANSFORM", raising=False)
    monkeypatch.setenv("DSINSPECT_WEB_TYPED_TRANSFORMS", "1")  # `dsinspect web --allow-typed-transforms`
    return cat, spec, seen


def table_dict(table) -> dict[str, str]:
    df = table.value
    return dict(zip(map(plain, df["field"]), map(plain, df["value"])))


def test_transform_typed_in_the_page_shows_each_sample_as_stored_and_as_fed(job):
    cat, spec, seen = job
    at = run(spec=replay.encode_spec(spec), step="2", rank="all")
    assert len(at.table) == 1 and not any("as fed" in m.value for m in at.markdown)  # no transform: as stored only
    at.text_input(key="rp_transform").input("webjob_xform:scale").run()
    assert not at.exception
    first = seen[(2, 0)]
    stored, fed = (table_dict(t) for t in at.table)
    assert stored["id"] == str(int(first.indices[0])) and "tokens" in stored
    assert fed == {"model_id": str(int(first.indices[0]) * 1000), "n_tokens": fed["n_tokens"]}
    assert any("as fed to the model" in m.value for m in at.markdown)
    assert "rank 1: transformed fingerprint " in codes(at)
    at.selectbox(key="rp_pick").select(5).run()  # rank 1, position 1
    stored, fed = (table_dict(t) for t in at.table)
    assert int(fed["model_id"]) == int(seen[(2, 1)].indices[1]) * 1000 == int(stored["id"]) * 1000
    assert "transform" not in at.query_params  # the transform never enters the URL


def test_typing_a_transform_needs_the_operators_consent(job, monkeypatch):
    cat, spec, seen = job
    monkeypatch.setenv("DSINSPECT_WEB_TYPED_TRANSFORMS", "0")  # the default of `dsinspect web`
    at = run(spec=replay.encode_spec(spec), step="2", rank="all")
    box = at.text_input(key="rp_transform")
    assert box.disabled and box.value == ""
    assert any("--allow-typed-transforms" in c.value for c in at.caption)
    assert not any("as fed" in m.value for m in at.markdown)


def test_a_transform_named_by_a_link_is_never_run(job):
    import webjob_xform

    cat, spec, _ = job
    webjob_xform.CALLS.clear()
    at = run(spec=replay.encode_spec(spec), step="0", rank="0", transform="webjob_xform:scale")
    assert webjob_xform.CALLS == [] and len(at.table) == 1
    assert "links never run code" in at.warning[0].value
    assert "webjob_xform:scale" in codes(at)


def test_a_raising_transform_is_one_clear_error(job):
    cat, spec, _ = job
    at = run(spec=replay.encode_spec(spec), step="0", rank="0")
    at.text_input(key="rp_transform").input("webjob_xform:explode").run()
    assert at.error[0].value == "That batch cannot be replayed."
    assert "transform webjob_xform:explode raised ValueError: boom" in codes(at)
    at.text_input(key="rp_transform").input("no_such_module_xyz:f").run()
    assert "cannot import 'no_such_module_xyz'" in codes(at)


def test_run_record_deep_link_checks_each_step_and_finds_the_first_divergence(job):
    cat, spec, seen = job
    index = int(seen[(3, 1)].indices[2])  # forge one row rank 1 read at step 3, under its old row hash
    assert all(index not in [int(i) for i in seen[(s, r)].indices] for s in (0, 1, 2) for r in (0, 1))
    rewrite_shard(cat.resolve("toy"), index, "blob", b"tampered", rehash=False)
    at = run(run="job1", step="2", rank="all", log="job1")
    assert at.title[0].value == "Replay" and any("run record job1" in c.value for c in at.caption)
    assert plain(at.success[0].value).startswith("step 2: ✓ matches the log (2 line(s), 2 stored")
    assert set(at.dataframe[0].value["log"]) == {"✓"}

    at.number_input(key="rp_step").set_value(3).run()
    errors = [plain(e.value) for e in at.error]
    assert errors == ["1 sample(s) no longer match their stored row hash",
                      "step 3: ✗ first divergence at step 3, rank 1 (stored; positions 2)"]
    rows = at.dataframe[0].value
    flagged = rows.loc[rows["log"] == "✗ diverges", ["rank", "position"]]
    assert list(flagged.itertuples(index=False, name=None)) == [(1, 2)]

    at = run(run="job1", step="0", rank="all", log="job1")
    assert plain(at.success[0].value).startswith("step 0: ✓")
    at.button(key="rp_whole_log").click().run()
    assert plain(at.error[0].value) == "the whole log: ✗ first divergence at step 3, rank 1 (stored; positions 2)"
    assert "no longer hash to their stored row hash" in codes(at)


def test_uploaded_log_and_the_log_picker(job):
    cat, spec, _ = job
    log = (cat.url.rstrip("/") + "/runs/job1/fingerprints/rank-00000.jsonl")
    with open(log, "rb") as f:
        data = f.read()
    at = run(spec=replay.encode_spec(spec), step="1", rank="0")
    assert not at.success and not at.error
    at.selectbox(key="rp_log").select("upload a file").run()
    at.file_uploader(key="rp_log_upload").upload("rank-00000.jsonl", data, "application/json").run()
    assert plain(at.success[0].value).startswith("step 1: ✓ matches the log (1 line(s), 1 stored")
    at.file_uploader(key="rp_log_upload").upload("bad.jsonl", b'{"step": 1}\n', "application/json").run()
    assert at.error[0].value == "The fingerprint log cannot be checked."
    assert "bad.jsonl:1: not a fingerprint log line" in codes(at)
    at.selectbox(key="rp_log").select("job1").run()
    assert param(at, "log") == "job1" and plain(at.success[0].value).startswith("step 1: ✓")


@pytest.mark.parametrize("name", ["../cat", "job1/..", "/etc", "nope"])
def test_only_listed_run_records_open(job, name):
    at = run(run=name, step="0", rank="0")
    assert at.error[0].value == "That batch cannot be replayed."
    assert "no run record" in codes(at)
    at = run(spec=replay.encode_spec(job[1]), step="0", rank="0", log=name)
    assert not at.success and not at.error  # an unlisted log name is ignored, never opened


def test_parse_log_and_verdicts():
    line = {"step": 1, "rank": 0, "fingerprint": "ab", "of": "stored"}
    assert replay.parse_log((json.dumps(line) + "\n\n").encode(), "x") == [line]
    header = {"segment": "ab12", "parent": None, "start": 0, "world_size": 2, "batch_size": 4, "rank": 0}
    assert replay.parse_log(f"{json.dumps(header)}\n{json.dumps(line)}\n".encode(), "x") == [header, line]
    with pytest.raises(UserError, match="x:1: not a fingerprint log line"):  # a header needs its start
        replay.parse_log(json.dumps({"segment": "ab12", "world_size": 2}).encode(), "x")
    with pytest.raises(UserError, match="no fingerprint log lines"):  # headers alone are no log
        replay.parse_log(json.dumps(header).encode(), "x")
    for bad in (b"", b"not json\n", b'{"step": "x", "rank": 0, "fingerprint": "a"}\n'):
        with pytest.raises(UserError):
            replay.parse_log(bad, "x")
    assert replay.verdict({"checked": 0, "divergence": None, "sides": {}, "steps": None}, "step 9")[0] == "warning"
    d = {"step": 4, "rank": 1, "of": "transformed", "positions": []}
    assert replay.verdict({"checked": 3, "divergence": d, "sides": {}, "steps": [4, 4]}, "s") == \
        ("error", "s: ✗ first divergence at step 4, rank 1 (transformed; no position attributable)")


def test_the_operators_preset_transform_and_run_routing(job, monkeypatch):
    from dsinspect.web.ui.nav import page_for

    assert page_for({"run": "job1"}) == "replay"
    cat, spec, seen = job
    monkeypatch.setenv("DSINSPECT_WEB_TRANSFORM", "webjob_xform:scale")  # `dsinspect web --transform`
    at = run(run="job1", step="1", rank="0")
    assert at.text_input(key="rp_transform").value == "webjob_xform:scale"
    assert table_dict(at.table[1])["model_id"] == str(int(seen[(1, 0)].indices[0]) * 1000)


def test_a_job_module_named_like_a_web_folder_is_the_jobs(job, tmp_path, monkeypatch):
    """`streamlit run` puts dsinspect/web first on sys.path; its folders (models, ui, …) must not hide a
    job's own package of that name from the transform (the router takes the folder off again)."""
    import sys

    cat, spec, seen = job
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "augment.py").write_text(TRANSFORM)
    monkeypatch.setenv("DSINSPECT_WEB_TRANSFORM", "models.augment:scale")
    try:
        at = run(run="job1", step="1", rank="0")
    finally:  # the job's `models` out of this process's modules again
        for name in ("models", "models.augment"):
            sys.modules.pop(name, None)
    assert len(at.table) == 2, [e.value for e in at.error]  # as stored, and as fed to the model
    assert table_dict(at.table[1])["model_id"] == str(int(seen[(1, 0)].indices[0]) * 1000)
