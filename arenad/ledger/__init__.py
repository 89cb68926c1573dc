"""The ``tangle.rollout.v1`` ledger: line validation, gate checks, JS-exact bytes, and
the pure projections of captured transcripts into canonical chat messages."""
