"""Stage 9 — turning results into things people read: terminal, JSON, HTML, Markdown."""
