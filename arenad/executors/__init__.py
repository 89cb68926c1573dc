"""The executors: where a cell's run happens (this machine, or a Ray cluster's nodes).

They sit above the process primitives of :mod:`arenad.runs` (groups, the wrapper, the
launcher, the :class:`~arenad.runs.executor.Executor` protocol they implement) and above
:mod:`arenad.containers`, whose leftovers the local executor reaps; nothing below imports
them.
"""
