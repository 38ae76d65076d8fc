"""The web app's learner-step view (#34), in a real headless Chromium on a copy of the sample catalog (one server for
the module): the Run page of the demo learner's record links each cell to the rollouts its rank consumed at that
step, whose keys and staleness are `consumed_step`'s; a slot links to that rollout's panel, its tokens coloured as
`shade` gives; rank=all shows every rank; a stream whose rollout ids and responses are markup shows them as text.
Through AppTest: the check of a learner's record (and of one that lies), and every bad link answered by one message;
at the model, the bounds a page holds to before a row is read."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pytest
from playwright.sync_api import expect
from streamlit.testing.v1 import AppTest
from test_web_browser import ARTIFACTS, browser, page, pytestmark, wait_ready  # noqa: F401  (fixtures)
from web_fixtures import APP, DEMO, backgrounds, codes, expected, plain, run
from web_server import artifact_log, running_web

from dsinspect.demo.tokenizer import load_tokenizer, tokenizer_bytes
from dsinspect.errors import UserError
from dsinspect.inspect.rollout_view import rollout_view
from dsinspect.inspect.runs import open_run
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.stream import StreamLearner, consumed_step, open_stream, read_learner_run
from dsinspect.web.models import learner as model
from dsinspect.web.models import run as run_model

SCRIPT = "<script>window.__pwned=1</script>"
IMG = "<img src=x onerror=window.__pwned=1>"
IDS = [f"{SCRIPT}0", "<b>x</b>1", "**md**2", f"{IMG}3", "<i>4</i>", "plain-5", "**6**", "<b>7</b>"]
RESPONSE = "<b>x</b> **md** <i>y</i>"
POLICY = [7, 8, 6, 7, 7, 7, 8, 7]   # the markup stream's policy versions: a learner at 7 takes 8 (order="commit")
MARKUP, LYING = "markup-learner", "lying-learner"


# -- the catalog: the sample catalog, plus a stream of markup rollouts, a learner's record over it and one that lies -

def _markup_stream(cat: Catalog) -> None:
    tok = load_tokenizer()
    tokenizer = {"kind": "huggingface", "blob": cat.put_blob("mk", tokenizer_bytes(), ".json")}

    def field(name: str, type_: pa.DataType, role: str, meaning: str | None) -> Field:
        options = {"tokenizer": tokenizer} if role == "tokens" else {}
        return Field(name, type_, role, options={**options, **({"rollout": meaning} if meaning else {})})

    fields = [field("rollout_id", pa.string(), "scalar", None), field("group", pa.int64(), "scalar", "group"),
              field("policy_version", pa.int64(), "scalar", "policy_version"),
              field("prompt_tokens", pa.list_(pa.int32()), "tokens", "prompt_tokens"),
              field("response_text", pa.string(), "text", "response_text"),
              field("response_tokens", pa.list_(pa.int32()), "tokens", "response_tokens"),
              field("sampler_logprobs", pa.list_(pa.float32()), "array", "sampler_logprobs"),
              field("learner_logprobs", pa.list_(pa.float32()), "array", "learner_logprobs"),
              field("reward", pa.float64(), "scalar", "reward")]
    prompt, response = tok.encode("<|user|>Say <b>x</b>=<|assistant|>").ids, tok.encode(RESPONSE).ids + [0]
    logps = [-0.25 - 0.5 * k for k in range(len(response))]
    rows = [{"rollout_id": key, "group": i // 4, "policy_version": pv, "prompt_tokens": prompt,
             "response_text": RESPONSE, "response_tokens": response, "sampler_logprobs": logps,
             "learner_logprobs": [x - 0.02 * (i + 1) for x in logps], "reward": float(i % 2)}
            for i, (key, pv) in enumerate(zip(IDS, POLICY))]
    stream = open_stream(cat, "mk", fields, key="rollout_id")
    stream.append(rows[:4], writer="s0")
    stream.append(rows[4:], writer="s1")


def write_learner_catalog(root: Path) -> Catalog:
    """A copy of the sample catalog (runs/demo-learner in it), the `mk` stream and two records over it: MARKUP
    (one rank, 4 a step, bound 1, at policy 7) and LYING (the same, its step 0 claiming policy 8: row 2, sampled by
    policy 6, is then staler than the bound, and the rows are not those the selection gives)."""
    shutil.copytree(DEMO, root)
    cat = Catalog(str(root))
    _markup_stream(cat)
    record = root / "runs" / MARKUP
    learner = StreamLearner(cat, "mk", 4, staleness_bound=1, record_dir=str(record))
    for _ in range(2):
        learner.next_batch(7)
    learner.close()
    shutil.copytree(record, root / "runs" / LYING)
    log = root / "runs" / LYING / "fingerprints" / "rank-00000.jsonl"
    log.write_text(log.read_text().replace('"version": 7', '"version": 8', 1))
    return cat


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> Catalog:
    return write_learner_catalog(tmp_path_factory.mktemp("learner") / "cat")


@pytest.fixture(scope="module")
def server(catalog):
    ARTIFACTS.mkdir(exist_ok=True)
    with running_web(catalog.url, artifact_log("web-server-learner")) as base:
        yield base


def consumed(catalog: Catalog, name: str, step: int, rank: int):
    return consumed_step(catalog, read_learner_run(f"{catalog.url}/runs/{name}"), step, rank)


def table_cells(pg, rank: int, css: str) -> list[str]:
    return pg.locator(f'table.{model.TABLE_CLASS}[data-rank="{rank}"] td.{css}').all_inner_texts()


def staleness_numbers(cells: list[str]) -> list[int | None]:
    return [int(c.split()[0]) if c.strip() else None for c in cells]


# -- in Chromium ----------------------------------------------------------------------------------------------

def test_a_run_grid_cell_opens_the_rollouts_its_rank_consumed_at_that_step(server, catalog, page):  # noqa: F811
    page.goto(f"{server}/runs?run=demo-learner")
    grid = page.locator(f"table.{run_model.GRID_CLASS}")
    grid.wait_for()
    wait_ready(page)
    cell = grid.locator('a[title^="rank 0, step 7:"]')
    assert cell.get_attribute("href") == "replay?run=demo-learner&step=7&rank=0"  # no fingerprint log: its own page
    cell.click()
    table = page.locator(f'table.{model.TABLE_CLASS}[data-rank="0"]')
    table.wait_for()
    wait_ready(page)
    assert urlsplit(page.url).path.endswith("/replay")
    assert page.get_by_role("heading", name="learner step 7 · rank 0 of 1").is_visible()
    assert page.get_by_text("4 rollouts dropped as stale at this step (all ranks)").is_visible()
    page.get_by_text("policy version 7 · staleness bound 1", exact=False).first.wait_for()
    c = consumed(catalog, "demo-learner", 7, 0)
    assert table_cells(page, 0, "key") == [str(k) for k in c.rows.column("rollout_id").to_pylist()]
    assert staleness_numbers(table_cells(page, 0, "staleness")) == c.staleness
    assert [int(t) for t in table_cells(page, 0, "slot")] == list(range(len(c.positions)))
    assert page.get_by_text(f"rank 0: fingerprint {c.fingerprint} recorded · ✓ the rows give the same").is_visible()
    page.screenshot(path=str(ARTIFACTS / "web-learner-step.png"), full_page=True)


def test_a_slot_link_opens_that_rollout_coloured_as_shade_gives(server, catalog, page):  # noqa: F811
    page.goto(f"{server}/replay?run=demo-learner&step=7&rank=0&color=sampler_logprobs")
    link = page.locator(f'table.{model.TABLE_CLASS} tr[data-slot="3"] td.slot a')
    link.wait_for()
    wait_ready(page)
    assert parse_qs(urlsplit(link.get_attribute("href")).query) == {
        "run": ["demo-learner"], "step": ["7"], "rank": ["0"], "slot": ["3"], "color": ["sampler_logprobs"]}
    link.click()
    page.locator('.dsi-rollout[data-part="response"]').wait_for()
    wait_ready(page)
    assert parse_qs(urlsplit(page.url).query)["slot"] == ["3"]
    c = consumed(catalog, "demo-learner", 7, 0)
    version, indices = c.version(catalog)
    view = rollout_view(version, indices[3])
    key = str(c.rows.column("rollout_id")[3].as_py())
    assert page.locator('[data-testid="stMetric"]').filter(has_text="rollout id").get_by_text(
        key, exact=True).is_visible()
    shown = backgrounds(page)
    assert shown == expected(view, "sampler_logprobs") and len(set(shown)) > 1
    assert page.locator(f'table.{model.TABLE_CLASS} tr.picked').get_attribute("data-slot") == "3"

    page.locator('[data-testid="stButtonGroup"]').get_by_text("loss mask", exact=True).click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('color') === 'loss_mask'")
    page.wait_for_function("(before) => { const c = document.querySelector('.dsi-rollout[data-part=response] .dsi-rc');"
                           " return c && getComputedStyle(c).backgroundColor !== before }", arg=shown[0])
    wait_ready(page)
    assert backgrounds(page) == expected(view, "loss_mask")
    assert backgrounds(page, "prompt") == expected(view, "loss_mask", "prompt") != expected(view, "loss_mask")[:7]
    assert parse_qs(urlsplit(page.url).query)["slot"] == ["3"]  # still the link to the learner's slot
    page.screenshot(path=str(ARTIFACTS / "web-learner-slot.png"), full_page=True)


def test_rank_all_shows_every_ranks_rollouts(server, catalog, page):  # noqa: F811
    page.goto(f"{server}/?run=demo-learner&step=2&rank=all")  # the root URL opens the Replay page too
    expect(page.locator(f"table.{model.TABLE_CLASS}")).to_have_count(2)
    wait_ready(page)
    assert page.get_by_role("heading", name="learner step 2 · all 2 ranks").is_visible()
    for rank in (0, 1):
        c = consumed(catalog, "demo-learner", 2, rank)
        assert table_cells(page, rank, "key") == [str(k) for k in c.rows.column("rollout_id").to_pylist()]
        assert staleness_numbers(table_cells(page, rank, "staleness")) == c.staleness
        hrefs = page.locator(f'table.{model.TABLE_CLASS}[data-rank="{rank}"] td.slot a').evaluate_all(
            "els => els.map(e => e.getAttribute('href'))")
        assert [parse_qs(urlsplit(h).query)["rank"] for h in hrefs] == [[str(rank)]] * 4  # a slot names its rank


def _no_markup_made(pg) -> None:
    main = pg.locator('[data-testid="stMain"]')
    for selector in ("b", "i", "strong", "em", "img[src='x']", "script"):
        assert main.locator(f"table.{model.TABLE_CLASS} {selector}, .dsi-rollout {selector}").count() == 0, selector
    assert pg.locator("script", has_text="__pwned").count() == 0
    assert pg.evaluate("typeof window.__pwned") == "undefined"


def test_markup_in_rollout_ids_and_responses_is_literal_text(server, catalog, page):  # noqa: F811
    page.goto(f"{server}/replay?run={MARKUP}&step=0&rank=0")
    page.locator(f"table.{model.TABLE_CLASS}").wait_for()
    wait_ready(page)
    c = consumed(catalog, MARKUP, 0, 0)
    assert table_cells(page, 0, "key") == IDS[:4] == c.rows.column("rollout_id").to_pylist()
    assert table_cells(page, 0, "resp") == [RESPONSE] * 4
    assert staleness_numbers(table_cells(page, 0, "staleness")) == c.staleness == [0, -1, 1, 0]
    assert table_cells(page, 0, "newer") == ["-1 ⚠ newer than the learner"]  # sampled by a newer policy: marked
    _no_markup_made(page)
    page.locator(f'table.{model.TABLE_CLASS} tr[data-slot="0"] td.slot a').click()
    response = page.locator('.dsi-rollout[data-part="response"]')
    response.wait_for()
    wait_ready(page)
    assert page.locator('[data-testid="stMetric"]').filter(has_text="rollout id").get_by_text(
        IDS[0], exact=True).is_visible()
    said = response.locator(".dsi-rc").evaluate_all("els => els.map(e => e.textContent).join('')")
    assert said == RESPONSE + "<|endoftext|>"
    assert page.get_by_role("heading", name="rank 0 · slot 0 · commit 0, row 0").is_visible()
    _no_markup_made(page)
    page.screenshot(path=str(ARTIFACTS / "web-learner-markup.png"), full_page=True)


# -- through AppTest ------------------------------------------------------------------------------------------

@pytest.fixture
def env(catalog, monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", catalog.url)
    monkeypatch.delenv("DSINSPECT_RUNS", raising=False)
    monkeypatch.delenv("DSINSPECT_WEB_TRANSFORM", raising=False)


def runs_page(name: str, check: bool = False) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("app_pages/runs.py")
    at.query_params["run"] = name
    at.run()
    if check:
        at.button(key="rn_check").click().run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def grid_of(at: AppTest) -> str:
    return next(m.value for m in at.markdown if run_model.GRID_CLASS in m.value)


def test_the_run_page_lists_learner_records_and_checks_one_with_the_learners_check(env):
    at = runs_page("demo-learner", check=True)
    assert {"demo-learner", MARKUP, LYING} <= set(at.selectbox(key="rn_run").options)
    assert any("demo-rollouts (stream) · ranks 2 → 1 · steps 0..9" in plain(c.value) for c in at.caption)
    assert [plain(s.value) for s in at.success][-1] == (
        "✓ the record matches the stream · 14 kept line(s) over steps 0..9: 80 rollouts consumed, 4 dropped as stale, "
        "4 line(s) superseded by a resume")
    hrefs = [html.unescape(h) for h in re.findall(r'href="(replay\?[^"]*)"', grid_of(at))]
    assert all("log=" not in h for h in hrefs)  # no fingerprint log: a learner's cell opens its own page
    # rank 0 at each of the 10 steps; rank 1 at steps 0..3 (kept) and 4..5 (superseded by the resume with one rank)
    assert hrefs == [f"replay?run=demo-learner&step={s}&rank=0" for s in range(10)] + \
        [f"replay?run=demo-learner&step={s}&rank=1" for s in range(6)]


def test_a_learner_record_that_lies_fails_its_check_and_shows_its_stale_rollouts(env, catalog):
    at = runs_page(LYING, check=True)
    assert len(at.error) == 1 and plain(at.error[0].value).startswith("✗ the record does not match the stream")
    said = codes(at)
    assert ("step 0, rank 0: consumed 4 rows, the stream gives 4; first difference at position 2: recorded commit 0 "
            "row 2, expected commit 0 row 3") in said
    assert "step 0, rank 0: 1 rollouts staler than the bound 1 (first: commit 0 row 2, policy 6 at learner version 8)" \
        in said
    assert '<td class="diverged">' in grid_of(at)
    link = next(el for el in at.get("page_link") if "Open step 0, rank 0" in plain(el.proto.label))
    assert parse_qs(link.proto.query_string) == {"run": [LYING], "step": ["0"], "rank": ["0"]}

    at = run(run=LYING, step="0", rank="0")
    table = next(m.value for m in at.markdown if model.TABLE_CLASS in m.value)
    marks = re.findall(r'<td class="num staleness ?(\w*)">([^<]*)</td>', table)
    assert marks == [("", "1"), ("", "0"), ("beyond", "2 ⚠ beyond the bound"), ("", "1")]
    assert codes(at).startswith("rank 0: fingerprint")  # the rows are those recorded: only the version lies
    assert "✓ the rows give the same" in codes(at)


@pytest.mark.parametrize("params, detail", [
    ({"step": "x"}, "no step 'x': a step is a number"),
    ({"step": "²"}, "no step '²'"),
    ({"step": "-1"}, "no step '-1'"),
    ({"step": "9" * 16}, "a step is a number"),
    ({"step": "10"}, "step 10 is past the record's end: it ends at step 9"),
    ({"step": "4", "rank": "1"}, "rank 1 is outside step 4's world size 1"),
    ({"step": "2", "rank": "-1"}, "no rank '-1'"),
    ({"step": "2", "rank": "0," * 5000}, "a rank is a number below step 2's world size 2, or all"),
    ({"step": "2", "rank": "0", "slot": "4"}, "no slot '4': this rank consumed 4 rollouts (slots 0..3)"),
    ({"step": "2", "rank": "0", "slot": "<b>x</b>"}, "no slot '<b>x</b>'"),
    ({"step": "2", "rank": "all", "slot": "1"}, "a slot names one rank's rollout"),
])
def test_a_bad_or_hostile_learner_link_is_one_message(env, params, detail):
    at = run(run="demo-learner", **params)
    assert len(at.error) == 1 and at.error[0].value == "That learner step cannot be shown."
    assert detail in codes(at)
    shown = "".join(m.value for m in at.markdown)
    assert model.TABLE_CLASS not in shown and ".dsi-rollout" not in shown


def test_a_bad_colour_on_a_slot_is_one_message(env):
    at = run(run="demo-learner", step="7", rank="0", slot="1", color="<b>x</b>")
    assert [e.value for e in at.error] == ["Tokens cannot be coloured so."] and "no colour '<b>x</b>'" in codes(at)
    at = run(run="demo-learner", step="7", rank="0", color="<b>x</b>")  # no slot: the table, its links uncoloured
    table = next(m.value for m in at.markdown if model.TABLE_CLASS in m.value)
    hrefs = [html.unescape(h) for h in re.findall(r'href="([^"]*)"', table)]
    assert not at.error and len(hrefs) == 8 and not any("color" in h for h in hrefs)


def test_a_page_is_refused_before_a_row_is_read_past_its_bounds(tmp_path, monkeypatch):
    """More than MAX_REPLAY_SAMPLES rollouts (rank=all of 2 × 600), or commits past MAX_REPLAY_BYTES: refused from the
    record and the commit files alone (reading a row here fails the test); one rank of 600 is shown."""
    cat = Catalog(str(tmp_path / "cat"))
    fields = [Field("rollout_id", pa.int64(), "scalar"), Field("response_text", pa.string(), "text"),
              Field("policy_version", pa.int64(), "scalar"), Field("reward", pa.float64(), "scalar")]
    open_stream(cat, "wide", fields, key="rollout_id").append(
        [{"rollout_id": i, "response_text": "x" * (i % 60), "policy_version": 3, "reward": 1.0} for i in range(1200)])
    record = str(tmp_path / "cat" / "runs" / "wide")
    learners = [StreamLearner(cat, "wide", 600, rank=r, world_size=2, record_dir=record) for r in range(2)]
    for learner in learners:
        learner.next_batch(3)
        learner.close()
    run_of = model.learner_run(open_run(record))
    shown = model.step_model(cat, run_of, 0, "1")
    assert [r["key"] for r in shown["batches"][0]["rows"]] == list(range(600, 1200))
    assert shown["batches"][0]["rows"][59]["response"] == "x" * (model.PREVIEW - 1) + "…"

    def no_read(*args, **kwargs):
        raise AssertionError("a row was read")

    monkeypatch.setattr(model, "consumed_step", no_read)
    with pytest.raises(UserError, match="holds 1,200 rollouts .* a page shows at most 1,024"):
        model.step_model(cat, run_of, 0, "all")
    monkeypatch.setattr(model, "MAX_REPLAY_BYTES", 1000)
    with pytest.raises(UserError, match="sit in commits of [0-9,]+ bytes; a page reads at most 1,000"):
        model.step_model(cat, run_of, 0, "0")
    with pytest.raises(UserError, match="sit in commits of"):
        model.consumed_rollout(cat, run_of, 0, 0, 5)
