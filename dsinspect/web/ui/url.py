"""Boxes that mirror a query parameter: the URL names each page's view (`?address=`, `?where=`, `?a=&b=`,
`?step=`), a box shows it, and typing in the box rewrites the URL.

A keyed widget keeps its value across reruns, also when the URL moved under it (a next/previous link,
Back, Forward); that old value, taken for a typed one, would be written back into the URL and undo the
navigation. So a box is set from the URL whenever the URL's value differs from the one it was last set
from (`follow_url`), and holds what was typed otherwise."""

from __future__ import annotations

from typing import Any

import streamlit as st

__all__ = ["follow_url", "address_box", "set_param", "set_params", "remember_dataset", "last_dataset"]


def follow_url(key: str, value: Any) -> None:
    """Set widget `key` to `value` (what the URL names) when the URL moved since the widget was last set
    from it, or the widget is new. Call before the widget is drawn, and draw it without `value=`."""
    shown = f"{key}.url"
    if key not in st.session_state or st.session_state.get(shown) != value:
        st.session_state[key] = st.session_state[shown] = value


def address_box(label: str, key: str, placeholder: str, default: str = "", drop: tuple[str, ...] = ()) -> str:
    """The page's `?address=` (or `default`), in a box; editing the box rewrites the URL (without the
    parameters `drop` names: they went with the old address) and reruns."""
    address = st.query_params.get("address") or default
    follow_url(key, address)
    typed = st.text_input(label, key=key, placeholder=placeholder).strip()
    if typed != address:
        set_params({"address": typed, **dict.fromkeys(drop)})
        st.rerun()
    return address


def set_param(name: str, value: str) -> None:
    """`?name=value` (a button's on_click: the rerun it makes shows the page the URL now names). A
    button, not st.page_link, for a link to the page already shown: such a link reruns the page but
    leaves the browser's address and history as they were."""
    st.query_params[name] = value


def set_params(values: dict[str, str | None]) -> None:
    """Several parameters at once (a button's on_click, as `set_param`); None removes one."""
    for name, value in values.items():
        if value is not None:
            st.query_params[name] = value
        elif name in st.query_params:
            del st.query_params[name]


def remember_dataset(address: str) -> None:
    """The dataset version (NAME@REF) the page shows: the sidebar's Dataset link, which carries no
    parameters, opens it again rather than the catalog's first dataset."""
    st.session_state["nav.dataset"] = address


def last_dataset(default: str) -> str:
    """The dataset version this session was last in (a Dataset or Sample page), else `default`."""
    return st.session_state.get("nav.dataset") or default
