-- Tallies of the cells read model, for the questions asked of a whole campaign (status
-- --summary, campaigns, the view's overview): at 100 000 cells a GROUP BY over `cells`
-- reads every row's stored state (3-4 KB each); these tables hold a few rows per campaign
-- and arm. Kept in the append's transaction by the cells projector (each cell's change
-- moves its contribution from its old key to its new one: arenad/readmodels/tallies.py)
-- and recreated by `arenad rebuild`. A key whose count fell to 0 stays, with 0.
--
-- Per campaign x arm x state x outcome (arenad/cell/outcome.py: the report's rule).
-- cost_units: the current attempts' recovered cost in pico-USD (integers: exact, the
-- same in any order), over the `costed` cells whose cost is known. last_update_ms: the
-- latest event time recorded for any cell ever counted under the key.
CREATE TABLE arm_tallies (
    campaign       TEXT    NOT NULL,
    arm            TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    outcome        TEXT    NOT NULL,
    cells          INTEGER NOT NULL,
    paused         INTEGER NOT NULL,
    scored         INTEGER NOT NULL,
    costed         INTEGER NOT NULL,
    cost_units     INTEGER NOT NULL,
    last_update_ms INTEGER NOT NULL,
    PRIMARY KEY (campaign, arm, state, outcome)
) WITHOUT ROWID;

-- Per campaign x instance x arm x outcome: how many of the instance's cells (reps) of
-- the arm came to each outcome.
CREATE TABLE instance_tallies (
    campaign    TEXT    NOT NULL,
    instance_id TEXT    NOT NULL,
    arm         TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    cells       INTEGER NOT NULL,
    PRIMARY KEY (campaign, instance_id, arm, outcome)
) WITHOUT ROWID;

-- A home made before these tables: count its cells now, from their stored states (the
-- outcome rule of arenad/cell/outcome.py, in SQL; tests/readmodels/test_tallies.py checks
-- this backfill against the fold).
CREATE TEMP VIEW tally_source AS
SELECT
    campaign,
    instance_id,
    arm,
    state,
    paused,
    updated_at_ms,
    cost_usd,
    CASE
        WHEN json_extract(s, '$.interrupted') IS NOT NULL THEN 'interrupted'
        WHEN json_type(s, '$.verified') = 'object' THEN
            CASE
                WHEN json_extract(s, '$.verified.scored') = 0 THEN 'unresolved'
                WHEN json_type(s, '$.verdict.resolved') IN ('true', 'false') THEN
                    CASE WHEN json_extract(s, '$.verdict.resolved') = 1
                        THEN 'resolved' ELSE 'unresolved' END
                WHEN json_type(s, '$.verified.verify_pass') = 'true' THEN 'resolved'
                ELSE 'unresolved'
            END
        WHEN json_extract(s, '$.failed.classification') = 'infrastructure' THEN 'infra_failed'
        WHEN json_extract(s, '$.failed.classification') = 'operator' THEN 'operator_failed'
        WHEN json_extract(s, '$.failed.classification') = 'agent' THEN 'unresolved'
        ELSE 'pending'
    END AS outcome,
    json_type(s, '$.verified') = 'object' AND json_extract(s, '$.verified.scored') = 1
        AND json_extract(s, '$.interrupted') IS NULL AS scored
FROM (SELECT *, CAST(state_json AS TEXT) AS s FROM cells);

INSERT INTO arm_tallies
SELECT campaign, arm, state, outcome, COUNT(*), SUM(paused), SUM(scored),
       COUNT(cost_usd), COALESCE(SUM(CAST(ROUND(cost_usd * 1e12) AS INTEGER)), 0),
       MAX(updated_at_ms)
FROM tally_source GROUP BY campaign, arm, state, outcome;

INSERT INTO instance_tallies
SELECT campaign, instance_id, arm, outcome, COUNT(*)
FROM tally_source GROUP BY campaign, instance_id, arm, outcome;

DROP VIEW tally_source;
