"""Stage 3 — the static diff: pair two op graphs (``match``), classify what differs as export
rewrites (``rewrites``), and run both on two artifacts (``static``)."""
