"""The web app's rollout and group views (#34), in a real headless Chromium on a catalog of rollouts (one
server for the module): a rollout opened by its id, its response tokens coloured by the value picked (the
colours rollout_view.shade gives), its group side by side and paged, a zero-advantage group flagged, markup
in tokens, turns and roles shown as text, a dataset that is not rollouts unchanged; and through AppTest,
every bad or hostile link parameter answered by one message, a group too large refused before it is read."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pytest
from playwright.sync_api import expect
from test_web_browser import ARTIFACTS, browser, page, pytestmark, wait_ready  # noqa: F401  (fixtures)
from web_fixtures import backgrounds, codes, expected, run
from web_server import artifact_log, running_web

from dsinspect.demo.rollouts import CHECKS, SCHEMA, demo_rollouts
from dsinspect.demo.tokenizer import load_tokenizer, tokenizer_bytes
from dsinspect.errors import NotFoundError, UserError
from dsinspect.inspect.rollout_view import rollout_view, scale, shade
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.web.models import rollout as model

EOS = 0
SCRIPT = "<script>window.__pwned=1</script>"
IMG = "<img src=x onerror=window.__pwned=1>"
PROMPT = f"<|user|>Say {SCRIPT} and <b>x</b> and **md**=<|assistant|>"
RESPONSE = f"<b>x</b> **md** {IMG}"
ROLE = "<i>critic</i>"          # a stored role that is markup: shown as text
BIG = 4097                      # rollouts in the `huge` dataset's one group: past model.MAX_GROUP
LONG = 70                       # rollouts in mk's group 2: past the MAX_GROUP_ROWS a group view builds


def rollout_id(row: int) -> int:
    """The rl dataset's rollout ids: not its row numbers (a link by id must not be read as a row)."""
    return 1000 + 3 * (95 - row)


def _fields(cat: Catalog, name: str) -> list[Field]:
    tokenizer = {"kind": "huggingface", "blob": cat.put_blob(name, tokenizer_bytes(), ".json")}
    roles = {"prompt_text": "text", "response_text": "text", "prompt_tokens": "tokens", "response_tokens": "tokens",
             "sampler_logprobs": "array", "learner_logprobs": "array", "ref_logprobs": "array", "loss_mask": "array",
             "rewards": "json", "turns": "json", "env_output": "text"}
    out = []
    for f in SCHEMA:
        role = roles.get(f.name, "scalar")
        options = {"tokenizer": tokenizer} if role == "tokens" else {}
        if f.name != "rollout_id":
            options["rollout"] = f.name
        if f.name == "response_tokens":
            options["checks"] = {k: list(v) if isinstance(v, tuple) else v for k, v in CHECKS.items()
                                 if k != "learner_version"}
        out.append(Field(f.name, pa.string() if role == "json" else f.type, role, options=options))
    return out


def _as_stored(row: dict) -> dict:
    return {**row, "rewards": json.dumps(row["rewards"]), "turns": json.dumps(row["turns"])}


def _markup_row(i: int, group: int, prompt: str, response: str, reward: float, turns: list | None = None) -> dict:
    tok = load_tokenizer()
    p, r = tok.encode(prompt).ids, tok.encode(response).ids + [EOS]
    logps = [-0.5 - 0.25 * k for k in range(len(r))]
    return {"rollout_id": i, "group": group, "policy_version": 7, "prompt_text": prompt, "prompt_tokens": p,
            "response_text": response, "response_tokens": r, "sampler_logprobs": logps,
            "learner_logprobs": [x - 0.01 for x in logps], "ref_logprobs": logps,
            "loss_mask": [0] * len(p) + [1] * len(r), "reward": reward, "rewards": {"correct": reward, "format": 1.0},
            "advantage": reward - 0.5, "finish_reason": "stop", "env_output": "",
            "turns": turns or [{"role": "user", "start": 0, "end": len(p)},
                               {"role": "assistant", "start": len(p), "end": len(p) + len(r)}]}


def _markup_rows() -> list[dict]:
    """Group 0: markup in the prompt, the response and a turn's role, a tool call; group 1: ten rollouts;
    group 2: LONG, more than the group view builds."""
    tok = load_tokenizer()
    n_prompt, n_call = len(tok.encode(PROMPT).ids), len(tok.encode("<b>x</b>").ids)
    turns = [{"role": "user", "start": 0, "end": n_prompt},
             {"role": "assistant", "start": n_prompt, "end": n_prompt + n_call, "type": "tool_call"},
             {"role": ROLE, "start": n_prompt + n_call, "end": n_prompt + 12}]
    rows = [_markup_row(0, 0, PROMPT, RESPONSE, 1.0, turns)]
    rows += [_markup_row(i, 0, PROMPT, RESPONSE, float(i % 2)) for i in (1, 2, 3)]
    rows += [_markup_row(10 + i, 1, "<|user|>7+5=<|assistant|>", "12", float(i % 2)) for i in range(10)]
    rows += [_markup_row(100 + i, 2, "<|user|>1+1=<|assistant|>", "2", float(i % 2)) for i in range(LONG)]
    return rows


def write_rollout_catalog(root: str) -> Catalog:
    """`rl`: the demo rollouts, ids reversed; `mk`: markup rollouts and a group of ten; `huge`: one group of
    BIG rollouts; `plain`: text that is not rollouts."""
    cat = Catalog(root)
    rows = [_as_stored({**row, "rollout_id": rollout_id(i)}) for i, row in enumerate(demo_rollouts().rows)]
    cat.write_version("rl", rows, _fields(cat, "rl"), key="rollout_id", tags=["v1"])
    cat.write_version("mk", [_as_stored(r) for r in _markup_rows()], _fields(cat, "mk"), key="rollout_id",
                      tags=["v1"])
    tokenizer = {"kind": "huggingface", "blob": cat.put_blob("huge", tokenizer_bytes(), ".json")}
    cat.write_version("huge", [{"rollout_id": i, "group": 0, "response_tokens": [20, EOS], "reward": 1.0}
                               for i in range(BIG)],
                      [Field("rollout_id", pa.int64(), "scalar"), Field("group", pa.int64(), "scalar",
                                                                        options={"rollout": "group"}),
                       Field("response_tokens", pa.list_(pa.int32()), "tokens",
                             options={"rollout": "response_tokens", "tokenizer": tokenizer}),
                       Field("reward", pa.float64(), "scalar", options={"rollout": "reward"})],
                      key="rollout_id", tags=["v1"])
    cat.write_version("plain", [{"id": i, "text": f"row {i} <b>not a rollout</b>"} for i in range(3)],
                      [Field("id", pa.int64(), "scalar"), Field("text", pa.string(), "text")], key="id", tags=["v1"])
    return cat


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> Catalog:
    return write_rollout_catalog(str(tmp_path_factory.mktemp("rollouts") / "cat"))


@pytest.fixture(scope="module")
def server(catalog):
    ARTIFACTS.mkdir(exist_ok=True)
    with running_web(catalog.url, artifact_log("web-server-rollouts")) as base:
        yield base


def settled(pg) -> None:
    """Streamlit done running the page (wait_ready), once what the test waited for shows that its run began."""
    wait_ready(pg)


def test_a_rollout_by_id_shows_its_tokens_coloured_by_the_chosen_value(server, catalog, page):  # noqa: F811
    row = 37  # group 9: a special token inside the response, at position 1
    view = rollout_view(catalog.resolve("rl@v1"), row)
    page.goto(f"{server}/?address=rl@v1&rollout={rollout_id(row)}")
    page.locator('.dsi-rollout[data-part="response"]').wait_for()
    settled(page)
    assert page.get_by_role("heading", name=re.compile(rf"^rl@[0-9a-f]{{12}}:{row}$")).is_visible()  # by id, not row
    assert page.locator('[data-testid="stMetric"]').filter(has_text="rollout id").get_by_text(
        str(rollout_id(row)), exact=True).is_visible()
    gap = backgrounds(page)
    assert gap == expected(view, "logprob_gap") and len(set(gap)) > 1  # the default: the log-prob gap
    flagged = page.locator('.dsi-rollout[data-part="response"] .dsi-rc.find')
    assert flagged.count() == 1 and flagged.get_attribute("data-pos") == "1"
    title = flagged.get_attribute("title")
    assert "id 3" in title and "<|assistant|>" in title and "finding: rollout-special-token" in title
    assert "sampler log-prob: -13.8155" in title and "loss mask: 1" in title
    page.screenshot(path=str(ARTIFACTS / "web-rollout.png"), full_page=True)

    page.locator('[data-testid="stButtonGroup"]').get_by_text("sampler log-prob", exact=True).click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('color') === 'sampler_logprobs'")
    page.wait_for_function("(before) => { const c = document.querySelector('.dsi-rollout[data-part=response] .dsi-rc');"
                           " return c && getComputedStyle(c).backgroundColor !== before }", arg=gap[0])
    settled(page)
    sampler = backgrounds(page)
    assert sampler == expected(view, "sampler_logprobs") and sampler != gap
    assert "rollout" in parse_qs(urlsplit(page.url).query)  # still the link by id, now with its colour

    page.goto(f"{server}/?address=rl@v1&rollout={rollout_id(row)}&color=loss_mask")  # the colour by link
    page.locator('.dsi-rollout[data-part="response"]').wait_for()
    settled(page)
    assert backgrounds(page, "prompt") == expected(view, "loss_mask", "prompt")
    assert backgrounds(page) == expected(view, "loss_mask")
    assert set(backgrounds(page, "prompt")) != set(backgrounds(page)[:3])  # prompt out of the loss, response in


def test_a_rollouts_group_side_by_side_paged_and_zero_advantage_flagged(server, catalog, page):  # noqa: F811
    page.goto(f"{server}/?address=rl@v1&rollout={rollout_id(37)}&color=advantage")
    link = page.get_by_role("link", name=re.compile("Group 9: every response"))
    link.wait_for()
    settled(page)
    link.click()
    page.wait_for_function("() => location.pathname.endsWith('/group')")
    page.get_by_text("Responses side by side").wait_for()
    settled(page)
    query = parse_qs(urlsplit(page.url).query)
    assert query["group"] == ["9"] and query["color"] == ["advantage"]
    expect(page.locator('.dsi-rollout[data-part="response"]')).to_have_count(4)  # rows 36..39, each its response
    for row in range(36, 40):
        assert page.get_by_role("link", name=re.compile(f"rollout {rollout_id(row)} · row {row}$")).is_visible()
    assert page.get_by_text("Zero advantage", exact=False).count() == 0
    group = model.group_at(catalog, "rl@v1", "9")
    lo, hi = scale(group, "advantage")
    first = page.locator('.dsi-rollout[data-part="response"]').first.locator(".dsi-rc").first
    assert first.evaluate("e => getComputedStyle(e).backgroundColor") == model.colour(
        shade(group.rows[0].response[0].values["advantage"], "advantage", lo, hi), "advantage")
    page.screenshot(path=str(ARTIFACTS / "web-rollout-group.png"), full_page=True)

    page.goto(f"{server}/group?address=rl@v1&group=4")  # every response right: all rewards equal
    page.get_by_text("Zero advantage: every reward in this group is the same", exact=False).wait_for()
    settled(page)
    page.get_by_text("rollout-zero-advantage-group", exact=False).filter(visible=True).first.wait_for()

    page.goto(f"{server}/?address=mk@v1&group=1")  # ten rollouts: two pages
    page.get_by_text("page 1 of 2", exact=False).wait_for()
    settled(page)
    expect(page.locator('.dsi-rollout[data-part="response"]')).to_have_count(model.GROUP_PAGE)
    page.get_by_role("button", name="next page").click()
    page.get_by_text("page 2 of 2", exact=False).wait_for()
    settled(page)
    assert parse_qs(urlsplit(page.url).query)["page"] == ["2"]
    expect(page.locator('.dsi-rollout[data-part="response"]')).to_have_count(10 - model.GROUP_PAGE)
    assert page.get_by_role("link", name=re.compile("rollout 19 · row 13$")).is_visible()


def _no_markup_made(pg) -> None:
    """No element the stored markup would have made, and no script of it ran."""
    main = pg.locator('[data-testid="stMain"]')
    for selector in ("b", "i", "strong", "em", "img[src='x']", "script"):
        assert main.locator(f".dsi-rollout {selector}").count() == 0, selector
    assert pg.locator("script", has_text="__pwned").count() == 0
    assert pg.evaluate("typeof window.__pwned") == "undefined"


def test_markup_in_a_rollout_is_literal_text(server, page):  # noqa: F811
    page.goto(f"{server}/?address=mk@v1:0")
    prompt = page.locator('.dsi-rollout[data-part="prompt"]')
    response = page.locator('.dsi-rollout[data-part="response"]')
    response.wait_for()
    settled(page)
    assert prompt.locator(".dsi-rc").evaluate_all("els => els.map(e => e.textContent).join('')") == PROMPT
    said = response.locator(".dsi-rc").evaluate_all("els => els.map(e => e.textContent).join('')")
    assert said == RESPONSE + "<|endoftext|>"
    assert response.locator(".dsi-turn.tool .dsi-toolmark").inner_text() == "tool call"
    assert response.locator(".dsi-turn.tool .dsi-rc").evaluate_all(
        "els => els.map(e => e.textContent).join('')") == "<b>x</b>"
    assert response.locator(".dsi-role").all_inner_texts() == ["assistant", ROLE]  # the stored role, as text
    assert response.locator(".dsi-turn").nth(1).get_attribute("data-role") == ROLE
    page.get_by_text(PROMPT, exact=True).filter(visible=True).first.wait_for()  # the prompt_text field
    _no_markup_made(page)
    page.screenshot(path=str(ARTIFACTS / "web-rollout-markup.png"), full_page=True)

    page.goto(f"{server}/group?address=mk@v1&group=0")
    expect(page.locator('.dsi-rollout[data-part="response"]')).to_have_count(4)
    settled(page)
    assert page.locator('.dsi-rollout[data-part="prompt"] .dsi-rc').evaluate_all(
        "els => els.map(e => e.textContent).join('')") == PROMPT
    _no_markup_made(page)


def test_a_dataset_that_is_not_rollouts_is_unaffected(server, page):  # noqa: F811
    page.goto(f"{server}/?address=plain@v1:1")
    page.get_by_text("row 1 <b>not a rollout</b>", exact=True).filter(visible=True).first.wait_for()
    settled(page)
    assert page.locator(".dsi-rollout").count() == 0
    assert page.get_by_text("Colour tokens by").count() == 0
    assert page.get_by_role("heading", name="Rollout").count() == 0
    assert page.locator('[data-testid="stButtonGroup"]').get_by_text("Raw", exact=True).is_visible()


# -- links that ask for something wrong or too much: one message, nothing read that need not be -------

@pytest.fixture
def rollout_env(catalog, monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", catalog.url)


@pytest.mark.parametrize("params, headline, detail", [
    ({"address": "rl@v1:3", "color": "<b>x</b>"}, "Tokens cannot be coloured so.", "no colour '<b>x</b>'"),
    ({"address": "rl@v1", "rollout": "37"}, "That rollout cannot be found.", "no rollout with rollout_id = '37'"),
    ({"address": "rl@v1", "rollout": "9" * 5000}, "That rollout cannot be found.", "at most 200 printable"),
    ({"address": "rl@v1:3", "rollout": "1000"}, "Name a rollout by its id or by its row, not both", None),
    ({"address": "plain@v1", "rollout": "1"}, "That rollout cannot be found.", "not LLM rollouts"),
    ({"address": "rl@v1", "group": "'; drop"}, "That group cannot be opened.", "no rollout in group"),
    ({"address": "huge@v1", "group": "0"}, "That group cannot be opened.", f"holds {BIG:,} rollouts"),
    ({"address": "mk@v1", "group": "1", "page": "3"}, "That page of the group does not exist.", "2 page(s)"),
    ({"address": "mk@v1", "group": "1", "page": "9" * 40}, "That page of the group does not exist.", None),
])
def test_a_bad_or_hostile_link_is_one_message(rollout_env, params, headline, detail):
    at = run(**params)
    assert len(at.error) == 1 and at.error[0].value.startswith(headline)
    if detail:
        assert detail in codes(at)
    assert not at.dataframe and ".dsi-rollout" not in "".join(m.value for m in at.markdown)


def test_a_group_longer_than_its_view_is_paged_and_links_to_all_its_rows(rollout_env):
    at = run(address="mk@v1", group="2", page="8")
    shown = model.MAX_GROUP_ROWS
    assert any(f"{LONG} rollouts · the first {shown} are shown" in c.value for c in at.caption)
    pages = -(-shown // model.GROUP_PAGE)
    assert any(f"page {pages} of {pages}" in c.value for c in at.caption)
    link = next(el for el in at.get("page_link") if "All 70 rollouts" in el.proto.label)
    assert parse_qs(link.proto.query_string)["where"] == ['"group" = 2']  # the Dataset page's filter: all its rows
    assert len(run(address="mk@v1", group="2", page=str(pages + 1)).error) == 1


def test_a_group_too_large_is_refused_before_its_rollouts_are_read(catalog, monkeypatch):
    """Refused from the group column alone: reading the BIG rollouts' other columns would fail here."""
    from dsinspect.loaders.store import version as versions

    real = versions.DatasetVersion.take

    def take(self, indices, columns=None, read_group=None):
        assert len(indices) <= model.MAX_GROUP, "the whole group was read"
        return real(self, indices, columns, read_group)

    monkeypatch.setattr(versions.DatasetVersion, "take", take)
    with pytest.raises(UserError, match=f"holds {BIG:,} rollouts"):
        model.group_at(catalog, "huge@v1", "0")
    one = model.rollout_at(catalog, "huge@v1", 4000)  # one of them alone opens (its row is checked alone)
    assert one is not None and one.group == 0 and [c.id for c in one.response] == [20, EOS]
    with pytest.raises(NotFoundError):
        model.group_at(catalog, "huge@v1", "1")
    assert model.rollout_at(catalog, "plain@v1", 0) is None


def test_token_html_escapes_every_stored_text(catalog):
    view = rollout_view(catalog.resolve("mk@v1"), 0)
    html = model.part_html(view.response, "response", view.turns, "logprob_gap", *scale(view, "logprob_gap"))
    assert "<b>" not in html and "<img" not in html and "<i>" not in html and "\n" not in html
    assert '">&lt;</span>' in html and '">&gt;</span>' in html  # the pieces "<" and ">" of "<b>x</b>", escaped
    assert 'data-role="&lt;i&gt;critic&lt;/i&gt;"><span class="dsi-role">&lt;i&gt;critic&lt;/i&gt;</span>' in html
    assert 'title="response #0 · id ' in html and "&#x27;&lt;&#x27;" in html  # the hover text: quotes escaped too
