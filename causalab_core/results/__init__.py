"""A run's results: scored, written, read back, resumed, tabled, compared and confirmed.

``score`` turns what an engine returns into byte-deterministic files (``intervals`` over rows), ``folder``
writes them as ``--out`` and ``manifest`` reads them back; ``resume`` keeps points of an interrupted run;
``table`` and ``compare`` read finished runs; ``confirm`` patches an estimate's top points for real.
"""
