"""``arenad export FORMAT``: projections of the log into the formats other tools read."""
