
-- Version 2: multi-step operations with recovery points (D7). Additive: nothing of version 1
-- changes. An operation holds the scope with a remote-tier claim (`claim`, renewed by `renew`,
-- finished by `op_finish`); between its steps it keeps its request and its recovery points here.

-- One row per operation: what a completer needs to drive it again.
CREATE TABLE IF NOT EXISTS __SCHEMA__.operations (
    -- The scope's digest, as in `records`.
    digest      bytea       PRIMARY KEY,
    -- The scope's injective encoding (tenant, method, key), to rebuild it.
    scope       bytea       NOT NULL,
    -- The scope's method: the name a completer finds the operation's handler by.
    method      text        NOT NULL,
    fingerprint bytea       NOT NULL,
    -- The request, as the caller gave it.
    request     bytea       NOT NULL,
    -- 1: unfinished. 2: finished (its record is stored).
    state       smallint    NOT NULL,
    -- How many runs began it (the first, then every resumption).
    runs        integer     NOT NULL,
    created_at  timestamptz NOT NULL,
    -- The last run's start or the last recovery point committed.
    updated_at  timestamptz NOT NULL,
    -- Unfinished: created + TTL. Finished: with its record. Past it the sweeper deletes the row
    -- and its steps.
    expires_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS operations_expires_at ON __SCHEMA__.operations (expires_at);
CREATE INDEX IF NOT EXISTS operations_unfinished ON __SCHEMA__.operations (updated_at)
    WHERE state = 1;

-- The recovery points: one row per committed step.
CREATE TABLE IF NOT EXISTS __SCHEMA__.steps (
    digest      bytea       NOT NULL REFERENCES __SCHEMA__.operations (digest) ON DELETE CASCADE,
    step        text        NOT NULL,
    -- Its place among the operation's committed steps, from 0.
    ordinal     integer     NOT NULL,
    -- The step's output, encoded.
    output      bytea       NOT NULL,
    -- The fencing token of the run that committed it.
    token       bigint      NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (digest, step)
);

INSERT INTO __SCHEMA__.schema_version (version)
SELECT 2 WHERE NOT EXISTS (SELECT 1 FROM __SCHEMA__.schema_version WHERE version >= 2);

-- Begins a run of an operation whose claim (token) the caller holds: records the request the
-- first time, or counts one more run. An expired row (and its steps) is dropped first. Outcomes:
-- 0 new, 1 resumed (earlier runs left recovery points or none), 3 conflict (the unfinished
-- operation of this scope was started with another fingerprint).
CREATE OR REPLACE FUNCTION __SCHEMA__.op_begin(
    p_digest bytea, p_scope bytea, p_method text, p_fp bytea, p_request bytea, p_ttl_ms bigint
) RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    t_now timestamptz := clock_timestamp();
BEGIN
    DELETE FROM __SCHEMA__.operations x WHERE x.digest = p_digest AND x.expires_at <= t_now;
    SELECT x.fingerprint INTO r FROM __SCHEMA__.operations x WHERE x.digest = p_digest
       FOR UPDATE;
    IF FOUND THEN
        IF r.fingerprint <> p_fp THEN
            RETURN 3;
        END IF;
        UPDATE __SCHEMA__.operations x SET runs = x.runs + 1, updated_at = t_now
         WHERE x.digest = p_digest;
        RETURN 1;
    END IF;
    INSERT INTO __SCHEMA__.operations
        (digest, scope, method, fingerprint, request, state, runs, created_at, updated_at,
         expires_at)
    VALUES (p_digest, p_scope, p_method, p_fp, p_request, 1, 1, t_now, t_now,
            t_now + p_ttl_ms * interval '1 millisecond');
    RETURN 0;
END $$;

-- Commits a recovery point: the step `p_step` with its output, fenced against the claim's token
-- and renewing its lease (as `renew`). 1 recorded, 0 fenced out (a later claim holds the scope,
-- or it completed): nothing written. Run it inside the step's transaction, right before COMMIT:
-- the scope's lock is then held until the step's writes commit.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_step(
    p_digest bytea, p_key bigint, p_token bigint, p_lease_ms bigint, p_lock_ms integer,
    p_step text, p_output bytea
) RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    t_now timestamptz;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_ms::text, true);
    PERFORM pg_advisory_xact_lock(p_key);
    t_now := clock_timestamp();
    UPDATE __SCHEMA__.records x
       SET expires_at = t_now + p_lease_ms * interval '1 millisecond'
     WHERE x.digest = p_digest AND x.token = p_token AND x.state = 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    INSERT INTO __SCHEMA__.steps (digest, step, ordinal, output, token, created_at)
    SELECT p_digest, p_step, count(*), p_output, p_token, t_now
      FROM __SCHEMA__.steps s WHERE s.digest = p_digest;
    UPDATE __SCHEMA__.operations x SET updated_at = t_now WHERE x.digest = p_digest;
    RETURN 1;
END $$;

-- Finishes an operation: its record completed as `complete` does (fenced, notifying waiters),
-- and the operation marked finished, to expire with its record. 1 stored, 0 fenced out.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_finish(
    p_digest bytea, p_key bigint, p_fp bytea, p_token bigint, p_owner bytea, p_value bytea,
    p_ttl_ms bigint, p_lock_ms integer, p_channel text
) RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    done smallint;
BEGIN
    done := __SCHEMA__.complete(p_digest, p_key, p_fp, p_token, p_owner, p_value, p_ttl_ms,
                                p_lock_ms, p_channel);
    IF done = 1 THEN
        UPDATE __SCHEMA__.operations x
           SET state = 2, updated_at = clock_timestamp(),
               expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
         WHERE x.digest = p_digest;
    END IF;
    RETURN done;
END $$;
