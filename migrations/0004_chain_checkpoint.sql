-- The last chain head an append verified: every append checks the chain from here (not from
-- the first row) before it writes, so a restart at a million events costs a short walk.
-- Advanced only inside an append's own transaction, so it never names an uncommitted row;
-- a tamperer who edits it only makes the next check walk further.
CREATE TABLE chain_checkpoint (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash BLOB    NOT NULL
);

INSERT INTO chain_checkpoint (id, seq, hash) VALUES (1, 0, zeroblob(32));
