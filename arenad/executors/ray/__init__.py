"""Cells on a Ray cluster: the Ray executor (head side) and its per-attempt actor (node side).

Only :mod:`arenad.executors.ray.executor`, :mod:`arenad.executors.ray.actor` and
:mod:`arenad.executors.ray.cluster` import ``ray`` (the optional ``arenad[ray]`` extra);
:mod:`arenad.executors.ray.batches`, the ingestion-by-offsets rule both sides share, does not.
"""
