"""dsinspect.web — the Streamlit app (`dsinspect web`). Imports dsinspect.inspect, defaults and the engine,
never dsinspect.tui; its own folders are layered (pyproject.toml, contract "web"), each importing only
those below it:

    app.py        the router `streamlit run` starts: st.navigation over the page scripts
    app_pages/    one script per page, UI only (not `pages/`: beside the router, that name switches
                  Streamlit to its old multipage mode for a session's first run)
    ui/           Streamlit parts the pages share: routing, inert text, URL boxes, field views, caches
    models/       what the pages show, as plain picklable data; no Streamlit
    settings.py   what the CLI hands the app through its environment; no Streamlit
"""
