"""Cells on a Ray cluster: the Ray executor (head side) and its per-attempt actor (node side).

Only :mod:`arenad.runs.ray.executor`, :mod:`arenad.runs.ray.actor` and
:mod:`arenad.runs.ray.cluster` import ``ray`` (the optional ``arenad[ray]`` extra);
:mod:`arenad.runs.ray.batches`, the ingestion-by-offsets rule both sides share, does not.
"""
