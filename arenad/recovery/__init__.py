"""Recovery of what agents stored: read-only captures of their own stores (I/O edge)
and the pure figures computed from those captures."""
