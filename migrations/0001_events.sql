-- The event log: the only source of truth. Append-only, enforced here.
CREATE TABLE events (
    seq            INTEGER PRIMARY KEY,   -- global order, gap-free, assigned by the writer
    stream         TEXT    NOT NULL,      -- cell/<id>, ingest/<id>/<attempt>, daemon, ...
    version        INTEGER NOT NULL,      -- 1-based position within the stream
    tag            TEXT    NOT NULL,      -- the event's stable type tag
    schema_version INTEGER NOT NULL,      -- the payload's shape version (see events.codec)
    recorded_at_ms INTEGER NOT NULL,      -- UTC epoch ms from the writer's clock
    payload        BLOB    NOT NULL,      -- msgspec JSON of the event
    hash           BLOB    NOT NULL,      -- sha256 over the previous row's hash and this row
    -- Optimistic concurrency is this key: two writers cannot fork a stream.
    UNIQUE (stream, version)
);

CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: UPDATE refused');
END;

CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: DELETE refused');
END;

-- The chain's head, written in the same transaction as each append, so deleting
-- the newest rows is as detectable as editing an old one.
CREATE TABLE log_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash BLOB    NOT NULL
);

INSERT INTO log_head (id, seq, hash) VALUES (1, 0, zeroblob(32));
