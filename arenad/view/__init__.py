"""``arenad view``: a read-only web UI over the log.

``cell`` (the pure fold of one cell's streams into what its page shows), ``diff`` (a
patch's lines, classified), ``pages`` (server-rendered HTML from those, autoescaped),
``server`` (the Starlette app: routes, the guard, the log follower behind the live
overview) and ``service`` (the I/O edge: the bind, the token rule, uvicorn).
"""
