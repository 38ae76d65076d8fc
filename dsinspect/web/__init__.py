"""dsinspect.web — placeholder, built in a later issue."""
