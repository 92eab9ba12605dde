"""Stages 5 to 8 — comparing two captured sides: pair their tensors (``align``), classify every
op (``divergence``), replay the origins alone (``isolate``); ``pipeline`` runs them in order.
``static`` is the static half (``tftrace diff-graph``): two artifacts loaded and diffed;
``statuses`` the words every op and verdict is given."""
