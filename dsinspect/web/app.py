"""The web app's entry script: a router over the pages (`dsinspect web` runs it).

Every page has its own path (`/catalog`, `/sample?address=…`), and the root URL is routed by its
parameters on every run (`/?address=demo-text@v1:17` shows that sample, `/` the Catalog): so a
history entry always shows what its URL names, and Back and Forward retrace what was seen. (A default
page chosen per run from the parameters, as before, made the browser map `/` to whichever page the
last run chose: Back to `/` opened the wrong page.)"""

import runpy
import sys
from pathlib import Path

import streamlit as st

from dsinspect.web.ui.nav import HERE, PAGES, favicon, page_for

# `streamlit run` puts this folder first on sys.path before every run, where its folders (models, ui, …)
# would hide a job's own modules of those names from its transform; everything here imports as dsinspect.web.…
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != HERE]


def root() -> None:
    """The root URL: the page its parameters name, the Catalog when they name none."""
    runpy.run_path(str(HERE / PAGES[page_for(st.query_params)][0]), run_name="__main__")


# a served image: a ":material/…:" page icon makes the browser fetch it from fonts.gstatic.com
st.set_page_config(page_title="dsinspect", page_icon=favicon(), layout="wide")
# the root is a page of its own, out of the menu: the menu's Catalog (`/catalog`) opens the catalog from
# anywhere, also from a root link that shows a sample
pages = [st.Page(root, title="dsinspect", url_path="home", default=True, visibility="hidden"),
         *(st.Page(HERE / script, title=title, icon=icon, url_path=key)
           for key, (script, title, icon) in PAGES.items())]
st.navigation(pages).run()
