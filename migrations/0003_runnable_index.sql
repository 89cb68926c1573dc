-- The scheduler's question, "which cells could move on, oldest first?", answered from a
-- partial index of the non-terminal, unpaused cells: at 100 000 cells, mostly finished, it
-- no longer scans the table on every freed slot. (The query repeats this WHERE clause
-- exactly, so SQLite can use the index.)
CREATE INDEX cells_runnable ON cells (submitted_at_ms, cell_id)
    WHERE state NOT IN ('failed', 'recovered') AND paused = 0;
