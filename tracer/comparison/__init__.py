"""Stages 5 to 8 — comparing two captured sides: pair their tensors (``align``), classify every
op (``divergence``), replay the origins alone (``isolate``); ``pipeline`` runs them in order."""
