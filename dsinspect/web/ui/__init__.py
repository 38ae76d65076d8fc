"""Streamlit parts the pages share: which page a URL opens (nav.py), text made inert (page.py), boxes
that mirror the URL (url.py), how each kind of field is drawn (fields.py), and the caches in front of
the models (cache.py).
May import dsinspect.web.models and .settings, dsinspect.inspect and the engine; never a page."""
