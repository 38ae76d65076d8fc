"""The web app's entry script: a router over the pages (`dsinspect web` runs it)."""

import streamlit as st

from dsinspect.web.web_nav import HERE, PAGES, favicon, page_for

# a served image: a ":material/…:" page icon makes the browser fetch it from fonts.gstatic.com
st.set_page_config(page_title="dsinspect", page_icon=favicon(), layout="wide")
default = page_for(st.query_params)
pages = [st.Page(HERE / script, title=title, icon=icon, url_path=key, default=key == default)
         for key, (script, title, icon) in PAGES.items()]
st.navigation(pages).run()
