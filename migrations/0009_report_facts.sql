-- The report-facts read model: each cell's report facts (arenad/readmodels/cell_facts.py
-- `cell_facts`, the fold `arenad report` builds its figures from), so `report` reads one
-- small row per cell instead of folding every cell's stream (at 100 000 cells the fold took
-- 11-23 s). Kept in the append's transaction by the report-facts projector
-- (arenad/readmodels/report_facts.py) from the cell streams, recreated by `arenad rebuild`.
-- `report --as-of` still folds the log's prefix.

-- facts: the CellFacts, msgpack-encoded. gateway: 1 when a run of the cell went through
-- the model gateway: its facts also need its ingest streams (the gateway's records of the
-- calls), which this projector does not follow, so the report folds such a cell from the
-- log (facts here are without the gateway's figures).
-- One b-tree keyed by cell id (a campaign's cells are the key range after "<campaign>:"),
-- so an append writes one row, not a row and two index entries.
CREATE TABLE report_facts (
    cell_id TEXT    NOT NULL PRIMARY KEY,
    gateway INTEGER NOT NULL,
    facts   BLOB    NOT NULL
) WITHOUT ROWID;

-- A row here: the table above does not hold the log's whole past (a home whose log
-- predates it); the report folds the log instead until `arenad rebuild` clears it.
CREATE TABLE report_facts_incomplete (id INTEGER PRIMARY KEY CHECK (id = 1));
INSERT INTO report_facts_incomplete (id) SELECT 1 WHERE EXISTS (SELECT 1 FROM events);
