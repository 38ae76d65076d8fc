"""The app's screens, one per module: catalog, dataset, sample, replay, run, diff (and a row's diff),
statistics, and the modal help, go-to and diff prompts. A screen may import the widgets, the adapter's
types and the app's messages; it never opens a file (the adapter is the only data boundary)."""
