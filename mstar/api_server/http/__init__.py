"""The HTTP base of the API server, below every router: error shapes and models, admission control
(middleware), the catch-all guard, the published schema, the stream framing and the listening
socket. The app that wires the routers is ``api_server.app``, above them."""
