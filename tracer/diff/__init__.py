"""Stage 3 — the static diff: pair two op graphs (``match``), classify what differs as export
rewrites (``rewrites``). Both work on op graphs alone; loading two artifacts to diff them is
:mod:`tracer.comparison.static`.

Every rewrite kind has one record in ``kinds`` (:data:`tracer.diff.kinds.KINDS`): its detector,
how alignment pairs its tensors, the cause it points at, its display order. Alignment, the
causes, isolation and the reports read those records; none switches on a kind's name. To add a
kind: write its detector as a method of ``rewrites._Context`` (returning ``Rewrite`` records of
the new kind; a new method is also named in ``kinds.PASSES``, where detection order is set) and
add its ``RewriteKind`` record to ``kinds.KINDS``. ``tests/test_graphdiff.py`` fails until the
record is complete.
"""
