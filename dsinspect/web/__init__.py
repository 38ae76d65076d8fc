"""dsinspect.web — the Streamlit app (`dsinspect web`): app.py routes to the *_page.py scripts, which lay out
what web_model / web_replay compute (no Streamlit there) through the caches in web_cache."""
