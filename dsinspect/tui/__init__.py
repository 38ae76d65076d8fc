"""dsinspect.tui — placeholder, built in a later issue."""
