"""What the web pages show, as plain picklable data: the catalog and a version's rows (catalog.py), a
sample (sample.py), a filter's page of rows (query.py), statistics (stats.py), a replayed batch
(replay.py; packed_replay.py: a batch of packed sequences), a run record (run.py; runs_dir.py: which
ones may be opened), a diff (diff.py). No Streamlit here (contract "web-models"): ui/cache.py caches
these results and the pages lay them out. May import dsinspect.web.settings, dsinspect.inspect,
defaults and the engine."""
