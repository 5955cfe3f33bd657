"""The HTTP shell of the API server: the app, admission control, error shapes, the catch-all guard,
the published schema and the listening socket."""
