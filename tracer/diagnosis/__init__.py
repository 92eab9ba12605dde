"""``tftrace diagnose`` — the experiment matrix: pairs of sides that differ in one factor
(``experiments``, in the words of ``plan``), run (``run``) and read (``outcomes``) into the three
answers (``answers``), ending with the verified recipe (``recipe``). ``serving`` reads TF Serving's
batching file and pads requests as the server does; ``replays`` runs fetch-alone replays;
``gpus`` asks whether a GPU is visible.

To add an experiment, edit ``experiments.py`` only: write the function that builds the factor's
pairs of sides from the :class:`~tracer.diagnosis.plan.PlanContext` (side B the remedy, or the
varied run; a skipped experiment with the reason when the context cannot run it), and add one
:class:`~tracer.diagnosis.plan.Factor` to ``FACTORS``: its title and description, its cause (a
key of ``tracer.causes.CAUSES``), what kind of remedy side B is (``"setting"``, ``"shape"``,
``"determinism"`` or ``"none"``), how to read its value from a capture (``setting``), and, only
where the defaults do not fit, its remedy text, cost sentence, ``quick``/``gpu``/``cheap`` flags.
``--only``, the skipped rows, the answers, the recipe and the scheduling all read that record.
"""
