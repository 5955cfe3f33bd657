"""The transport between mstar's processes: typed messages, socket addresses, the socket helpers
and the start-up of child processes. Used by the worker, the conductor and the API server."""
