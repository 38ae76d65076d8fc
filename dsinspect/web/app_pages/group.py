"""Group page: every response to one prompt (a GRPO group of LLM RL rollouts) side by side, with rewards and
advantages, a zero-advantage group flagged and the group's findings (`group?address=NAME@REF&group=G`, the
tokens coloured by `&color=`, `&page=N` past the first GROUP_PAGE responses)."""

import streamlit as st

from dsinspect.web.models import rollout as model
from dsinspect.web.ui import cache, rollout
from dsinspect.web.ui.page import or_stop
from dsinspect.web.ui.url import follow_url, remember_dataset

url = cache.url()
params = st.query_params
address, group = params.get("address", ""), params.get("group", "")
st.title("Group")
left, right = st.columns([3, 1])
follow_url("group_address", address)
follow_url("group_value", group)
typed_address = left.text_input("Rollouts (NAME[@REF])", key="group_address", placeholder="demo-rollouts@v2").strip()
typed_group = right.text_input("Group", key="group_value", placeholder="9").strip()
if (typed_address, typed_group) != (address, group):
    for name in ("address", "group", "page"):
        if name in params:
            del params[name]
    if typed_address:
        params["address"] = typed_address
    if typed_group:
        params["group"] = typed_group
    st.rerun()
if not address or not group:
    st.info("Enter a version of LLM RL rollouts and a group, e.g. demo-rollouts@v2 and 9: every response to "
            "that prompt is shown side by side.")
    st.stop()

info = or_stop(lambda: cache.dataset_model(url, address), "That address cannot be opened.")
remember_dataset(f"{info['name']}@{info['short_id']}")
g = or_stop(lambda: cache.group_model(url, f"{info['name']}@{info['id']}", group), "That group cannot be opened.")
page = or_stop(lambda: model.parse_page(params.get("page"), model.pages(len(g.rows), model.GROUP_PAGE)),
               "That page of the group does not exist.")
color = rollout.color_choice("group_color")
rollout.group_panel(g, color, page, g.rows[0].columns.get("group"))
