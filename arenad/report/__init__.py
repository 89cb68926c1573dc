"""``arenad report``: arms compared with confidence intervals, computed from events only.

``stats`` (pure math), ``project`` (the pure fold of cells' streams into a ``Report``),
``render`` (terminal tables, JSON bytes, the HTML page) and ``service`` (the I/O edge:
the store in, the page file out).
"""
