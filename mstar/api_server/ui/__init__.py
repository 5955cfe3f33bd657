"""What people look at: the browser playground and the operator's page (``pages``, the static files
in ``static/``), and the Grafana dashboard generated from the metric declarations (``grafana``).

Nothing here is imported by the routes: the composition root (``app``) installs the pages, and
``mstar config docs`` writes the dashboard.
"""
