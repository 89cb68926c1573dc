-- table arm_tallies
CREATE TABLE arm_tallies (
campaign TEXT NOT NULL,
arm TEXT NOT NULL,
state TEXT NOT NULL,
outcome TEXT NOT NULL,
cells INTEGER NOT NULL,
paused INTEGER NOT NULL,
scored INTEGER NOT NULL,
costed INTEGER NOT NULL,
cost_units INTEGER NOT NULL,
last_update_ms INTEGER NOT NULL,
PRIMARY KEY (campaign, arm, state, outcome)
) WITHOUT ROWID;

-- table campaign_spend
CREATE TABLE campaign_spend (
campaign TEXT NOT NULL PRIMARY KEY,
attempts INTEGER NOT NULL,
cost_units INTEGER NOT NULL,
unknown INTEGER NOT NULL
) WITHOUT ROWID;

-- table cells
CREATE TABLE cells (
cell_id TEXT PRIMARY KEY,
campaign TEXT NOT NULL,
instance_id TEXT NOT NULL,
arm TEXT NOT NULL,
arm_kind TEXT NOT NULL,
rep INTEGER NOT NULL,
attempt INTEGER NOT NULL,
state TEXT NOT NULL,
paused INTEGER NOT NULL,
abort_requested INTEGER NOT NULL,
submitted_at_ms INTEGER NOT NULL,
updated_at_ms INTEGER NOT NULL,
started_at_ms INTEGER,
ended_at_ms INTEGER,
wall_s REAL,
run_rc INTEGER,
scored INTEGER,
verify_pass INTEGER,
patch_lines INTEGER,
tokens_in INTEGER,
tokens_out INTEGER,
cost_usd REAL,
stream_version INTEGER NOT NULL,
last_seq INTEGER NOT NULL,
state_json BLOB NOT NULL
);

-- table chain_checkpoint
CREATE TABLE chain_checkpoint (
id INTEGER PRIMARY KEY CHECK (id = 1),
seq INTEGER NOT NULL,
hash BLOB NOT NULL
);

-- table events
CREATE TABLE events (
seq INTEGER PRIMARY KEY,
stream TEXT NOT NULL,
version INTEGER NOT NULL,
tag TEXT NOT NULL,
schema_version INTEGER NOT NULL,
recorded_at_ms INTEGER NOT NULL,
payload BLOB NOT NULL,
hash BLOB NOT NULL,
UNIQUE (stream, version)
);

-- table instance_tallies
CREATE TABLE instance_tallies (
campaign TEXT NOT NULL,
instance_id TEXT NOT NULL,
arm TEXT NOT NULL,
outcome TEXT NOT NULL,
cells INTEGER NOT NULL,
PRIMARY KEY (campaign, instance_id, arm, outcome)
) WITHOUT ROWID;

-- table log_head
CREATE TABLE log_head (
id INTEGER PRIMARY KEY CHECK (id = 1),
seq INTEGER NOT NULL,
hash BLOB NOT NULL
);

-- table report_facts
CREATE TABLE report_facts (
cell_id TEXT NOT NULL PRIMARY KEY,
gateway INTEGER NOT NULL,
facts BLOB NOT NULL
) WITHOUT ROWID;

-- table report_facts_incomplete
CREATE TABLE report_facts_incomplete (id INTEGER PRIMARY KEY CHECK (id = 1));

-- table schema_migrations
CREATE TABLE schema_migrations (
name TEXT PRIMARY KEY,
checksum TEXT NOT NULL,
applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- table spend_arms
CREATE TABLE spend_arms (
campaign TEXT NOT NULL,
arm TEXT NOT NULL,
kind TEXT NOT NULL,
PRIMARY KEY (campaign, arm)
) WITHOUT ROWID;

-- table spend_attempts
CREATE TABLE spend_attempts (
cell_id TEXT NOT NULL,
attempt INTEGER NOT NULL,
started INTEGER NOT NULL,
ended INTEGER NOT NULL,
recovered INTEGER NOT NULL,
supervisor BLOB,
PRIMARY KEY (cell_id, attempt)
) WITHOUT ROWID;

-- table spend_incomplete
CREATE TABLE spend_incomplete (id INTEGER PRIMARY KEY CHECK (id = 1));

-- index cells_by_identity
CREATE INDEX cells_by_identity ON cells (campaign, instance_id, arm, rep);

-- index cells_by_state
CREATE INDEX cells_by_state ON cells (state);

-- index cells_runnable
CREATE INDEX cells_runnable ON cells (submitted_at_ms, cell_id)
WHERE state NOT IN ('failed', 'recovered') AND paused = 0;

-- index spend_attempts_open
CREATE INDEX spend_attempts_open ON spend_attempts (cell_id, attempt)
WHERE started = 1 AND recovered = 0;

-- trigger events_are_append_only_delete
CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
BEGIN
SELECT RAISE(ABORT, 'events are append-only: DELETE refused');
END;

-- trigger events_are_append_only_update
CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
BEGIN
SELECT RAISE(ABORT, 'events are append-only: UPDATE refused');
END;

