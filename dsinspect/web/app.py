"""The web app's entry script: a router over the pages (`dsinspect web` runs it)."""

import sys
from pathlib import Path

import streamlit as st

from dsinspect.web.ui.nav import HERE, PAGES, favicon, page_for

# `streamlit run` puts this folder first on sys.path before every run, where its folders (models, ui, …)
# would hide a job's own modules of those names from its transform; everything here imports as dsinspect.web.…
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != HERE]
# a served image: a ":material/…:" page icon makes the browser fetch it from fonts.gstatic.com
st.set_page_config(page_title="dsinspect", page_icon=favicon(), layout="wide")
default = page_for(st.query_params)
pages = [st.Page(HERE / script, title=title, icon=icon, url_path=key, default=key == default)
         for key, (script, title, icon) in PAGES.items()]
st.navigation(pages).run()
