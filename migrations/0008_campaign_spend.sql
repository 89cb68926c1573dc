-- The spend read model: what `arenad campaigns` (and status's campaign lines) need of each
-- campaign's spend without folding the whole log (at 100 000 cells the fold of every
-- run's events took 10 s). Kept in the append's transaction by the spend projector
-- (arenad/readmodels/spend.py) from the cell and campaign streams, recreated by `arenad
-- rebuild`. An attempt's share is final once it is recovered; the attempts still open
-- (started, not recovered) are folded when read, with their ingest streams (their live
-- cost is only in their lines), so no ingested line passes through this projector.

-- Each campaign's arms' kinds, as its submissions recorded them (what a recovery's cost
-- of record is read by: arenad/cell/spend.py run_cost).
CREATE TABLE spend_arms (
    campaign TEXT NOT NULL,
    arm      TEXT NOT NULL,
    kind     TEXT NOT NULL,
    PRIMARY KEY (campaign, arm)
) WITHOUT ROWID;

-- Every attempt the spend fold knows (it started a run, was recovered or had a
-- supervisor outcome). supervisor: the attempt's latest SupervisorOutcome (encoded), kept
-- until its recovery reads it.
CREATE TABLE spend_attempts (
    cell_id    TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    started    INTEGER NOT NULL,
    ended      INTEGER NOT NULL,
    recovered  INTEGER NOT NULL,
    supervisor BLOB,
    PRIMARY KEY (cell_id, attempt)
) WITHOUT ROWID;

CREATE INDEX spend_attempts_open ON spend_attempts (cell_id, attempt)
    WHERE started = 1 AND recovered = 0;

-- Per campaign, the recovered attempts that started a run: how many, the sum of the
-- known costs in pico-USD (integers: exact in any order), how many are of unknown cost.
CREATE TABLE campaign_spend (
    campaign      TEXT    NOT NULL PRIMARY KEY,
    attempts      INTEGER NOT NULL,
    cost_units    INTEGER NOT NULL,
    unknown       INTEGER NOT NULL
) WITHOUT ROWID;

-- A row here: the tables above do not hold the log's whole past (a home whose log
-- predates them); readers fold the log instead until `arenad rebuild` clears it.
CREATE TABLE spend_incomplete (id INTEGER PRIMARY KEY CHECK (id = 1));
INSERT INTO spend_incomplete (id) SELECT 1 WHERE EXISTS (SELECT 1 FROM events);
