"""Stage 6 — metrics over two arrays: ``arrays.compare_arrays`` is the one entry point; the
compiled kernel (``kernel``, numba) and its numpy twin (``block``) are driven by ``scan`` and
give the same bits; ``result`` holds what they return."""
