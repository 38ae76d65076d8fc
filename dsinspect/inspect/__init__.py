"""dsinspect.inspect — placeholder, built in a later issue."""
