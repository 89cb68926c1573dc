"""Container engines: what arenad asks of docker (its CLI; see :mod:`arenad.containers.docker`)."""
