-- The cells read model: one row per cell, a fold of its stream, updated in the
-- same transaction as the append. `arenad rebuild` recreates it from the log.
CREATE TABLE cells (
    cell_id          TEXT    PRIMARY KEY,
    campaign         TEXT    NOT NULL,
    instance_id      TEXT    NOT NULL,
    arm              TEXT    NOT NULL,
    arm_kind         TEXT    NOT NULL,
    rep              INTEGER NOT NULL,
    attempt          INTEGER NOT NULL,
    state            TEXT    NOT NULL,
    paused           INTEGER NOT NULL,
    abort_requested  INTEGER NOT NULL,
    submitted_at_ms  INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    started_at_ms    INTEGER,
    ended_at_ms      INTEGER,
    wall_s           REAL,
    run_rc           INTEGER,
    scored           INTEGER,
    verify_pass      INTEGER,
    patch_lines      INTEGER,
    tokens_in        INTEGER,
    tokens_out       INTEGER,
    cost_usd         REAL,
    stream_version   INTEGER NOT NULL,
    last_seq         INTEGER NOT NULL,
    state_json       BLOB    NOT NULL      -- the whole CellState, for the next fold step
);

CREATE INDEX cells_by_state ON cells (state);
CREATE INDEX cells_by_identity ON cells (campaign, instance_id, arm, rep);
