"""The scheduler's web UI (Scheduling, Operations, History, Nodes): Jinja2 pages refreshed with htmx, Plotly charts.

See ``app.py`` for the routes and ``ARCHITECTURE.md`` beside it for how pages, assets and history fit together.
"""
