"""``tftrace diagnose`` — the experiment matrix: pairs of sides that differ in one factor
(``experiments``), run (``run``) and read (``outcomes``) into the three answers (``answers``),
ending with the verified recipe (``recipe``)."""
