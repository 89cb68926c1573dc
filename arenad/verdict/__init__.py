"""What a run produced and whether it counts: patch extraction, the verify gate, the judge."""
