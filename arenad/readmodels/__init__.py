"""Read models: tables derived from the log, kept in the append's transaction."""
