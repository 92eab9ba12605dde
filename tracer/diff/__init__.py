"""Stage 3 — the static diff: pair two op graphs (``match``), classify what differs as export
rewrites (``rewrites``). Both work on op graphs alone; loading two artifacts to diff them is
:mod:`tracer.comparison.static`."""
