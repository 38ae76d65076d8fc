"""The page scripts `app.py` routes to (st.Page), one per page: they lay out what `ui/cache.py` serves
from `models/` and hold no logic of their own. Streamlit runs them as scripts; nothing imports them.
May import dsinspect.web.ui, .models and .settings, and read-only helpers of dsinspect.inspect."""
