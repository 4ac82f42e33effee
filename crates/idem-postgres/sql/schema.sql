-- idem-postgres schema, version 1 (D4). Applied by `idem_postgres::migrate`, which replaces
-- __SCHEMA__ with the schema's quoted name and runs this file as one implicit transaction under
-- an advisory lock, so any number of instances may apply it at once. Every statement is
-- idempotent: applying it again changes nothing but the functions' bodies.

SET LOCAL client_min_messages = warning;

CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

-- Every claim's fencing token, for every scope: one sequence, so a token is greater than every
-- token handed out before it, even for a scope whose row was swept, forgotten or never
-- committed. Sequences are WAL-logged ahead of use, so a crash never hands a number out twice.
CREATE SEQUENCE IF NOT EXISTS __SCHEMA__.fence AS bigint;

-- One row per scope.
CREATE TABLE IF NOT EXISTS __SCHEMA__.records (
    -- SHA-256 of the scope's injective encoding (tenant, method, key): 32 bytes.
    digest      bytea       PRIMARY KEY,
    -- The request fingerprint (16 bytes): the same key with another body is a conflict (K4).
    fingerprint bytea       NOT NULL,
    -- 1: claimed, in flight (remote-tier mode; a transactional claim is never committed in
    -- flight). 2: completed, `result` holds the encoded value.
    state       smallint    NOT NULL,
    -- The fencing token of the claim that wrote the row.
    token       bigint      NOT NULL,
    -- The owner (OwnerId, 16 bytes) of that claim.
    owner       bytea       NOT NULL,
    -- The encoded value, once completed.
    result      bytea,
    -- Whether another instance waits for this claim (its completion then sends a NOTIFY).
    awaited     boolean     NOT NULL DEFAULT false,
    -- When the row was claimed (in flight) or completed.
    created_at  timestamptz NOT NULL,
    -- While in flight: the lease deadline. Once completed: the expiry (completion + TTL).
    -- Past it the row is as good as gone (every function ignores it); the sweeper deletes it.
    expires_at  timestamptz NOT NULL
) WITH (fillfactor = 90);

-- The sweeper's index: expired rows are found without a scan.
CREATE INDEX IF NOT EXISTS records_expires_at ON __SCHEMA__.records (expires_at);

CREATE TABLE IF NOT EXISTS __SCHEMA__.schema_version (version integer NOT NULL);
INSERT INTO __SCHEMA__.schema_version (version)
SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM __SCHEMA__.schema_version);

-- Every function that writes a record first takes a transaction-scoped advisory lock on the
-- scope (`p_key`, the digest's first 8 bytes): remote-tier calls and transactional claims of a
-- scope never interleave, and a transactional claim holds it until its transaction ends.

-- Remote-tier claim (D1, D2). Outcomes: 0 claimed (token), 4 claimed back from this owner's
-- orphan (token), 1 in flight elsewhere (holder token, lease left), 2 completed (result),
-- 3 conflict. A lock wait past `p_lock_ms` raises lock_not_available (55P03).
CREATE OR REPLACE FUNCTION __SCHEMA__.claim(
    p_digest bytea, p_key bigint, p_fp bytea, p_owner bytea, p_lease_ms bigint, p_lock_ms integer
) RETURNS TABLE (outcome smallint, token bigint, lease_left_ms bigint, result bytea)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    t_now timestamptz;
    t bigint;
    took_back boolean := false;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_ms::text, true);
    PERFORM pg_advisory_xact_lock(p_key);
    t_now := clock_timestamp();
    SELECT x.fingerprint, x.state, x.token, x.owner, x.result, x.awaited, x.expires_at INTO r
      FROM __SCHEMA__.records x WHERE x.digest = p_digest;
    IF FOUND AND r.expires_at > t_now THEN
        IF r.fingerprint <> p_fp THEN
            RETURN QUERY SELECT 3::smallint, r.token, 0::bigint, NULL::bytea;
            RETURN;
        END IF;
        IF r.state = 2 THEN
            RETURN QUERY SELECT 2::smallint, r.token, 0::bigint, r.result;
            RETURN;
        END IF;
        IF r.owner <> p_owner THEN
            IF NOT r.awaited THEN
                UPDATE __SCHEMA__.records x SET awaited = true WHERE x.digest = p_digest;
            END IF;
            RETURN QUERY SELECT 1::smallint, r.token,
                ceil(extract(epoch FROM r.expires_at - t_now) * 1000)::bigint, NULL::bytea;
            RETURN;
        END IF;
        took_back := true;
    END IF;
    t := nextval('__SCHEMA__.fence');
    INSERT INTO __SCHEMA__.records AS x
        (digest, fingerprint, state, token, owner, result, awaited, created_at, expires_at)
    VALUES (p_digest, p_fp, 1, t, p_owner, NULL, false, t_now,
            t_now + p_lease_ms * interval '1 millisecond')
    ON CONFLICT (digest) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, state = 1, token = EXCLUDED.token,
        owner = EXCLUDED.owner, result = NULL, awaited = x.awaited AND took_back,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at;
    RETURN QUERY SELECT (CASE WHEN took_back THEN 4 ELSE 0 END)::smallint, t, 0::bigint,
        NULL::bytea;
END $$;

-- Remote-tier completion (D1, D5): 1 stored (now, or already by this very claim), 0 fenced out
-- (a later claim wrote the row). Written even past the lease while no later claim exists, and
-- written again if the row was swept or forgotten meanwhile. Notifies waiters.
CREATE OR REPLACE FUNCTION __SCHEMA__.complete(
    p_digest bytea, p_key bigint, p_fp bytea, p_token bigint, p_owner bytea, p_value bytea,
    p_ttl_ms bigint, p_lock_ms integer, p_channel text
) RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    t_now timestamptz;
    was_awaited boolean := false;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_ms::text, true);
    PERFORM pg_advisory_xact_lock(p_key);
    SELECT x.state, x.token, x.awaited INTO r FROM __SCHEMA__.records x WHERE x.digest = p_digest;
    IF FOUND THEN
        was_awaited := r.awaited;
        IF r.token = p_token AND r.state = 2 THEN
            RETURN 1;
        END IF;
        IF r.token > p_token OR (r.token = p_token AND r.state <> 1) THEN
            RETURN 0;
        END IF;
    END IF;
    t_now := clock_timestamp();
    INSERT INTO __SCHEMA__.records AS x
        (digest, fingerprint, state, token, owner, result, awaited, created_at, expires_at)
    VALUES (p_digest, p_fp, 2, p_token, p_owner, p_value, false, t_now,
            t_now + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (digest) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, state = 2, token = EXCLUDED.token,
        owner = EXCLUDED.owner, result = EXCLUDED.result, awaited = false,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at;
    IF was_awaited THEN
        PERFORM pg_notify(p_channel, encode(p_digest, 'hex'));
    END IF;
    RETURN 1;
END $$;

-- Remote-tier release after a failed action: 1 released, 0 fenced out (the row is gone,
-- completed, or held by another claim). Notifies waiters.
CREATE OR REPLACE FUNCTION __SCHEMA__.release(
    p_digest bytea, p_key bigint, p_token bigint, p_lock_ms integer, p_channel text
) RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    was_awaited boolean;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_ms::text, true);
    PERFORM pg_advisory_xact_lock(p_key);
    DELETE FROM __SCHEMA__.records x
     WHERE x.digest = p_digest AND x.token = p_token AND x.state = 1
    RETURNING x.awaited INTO was_awaited;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF was_awaited THEN
        PERFORM pg_notify(p_channel, encode(p_digest, 'hex'));
    END IF;
    RETURN 1;
END $$;

-- Renewal of a claim's lease (D8), by a holder whose action still runs: the in-flight row of
-- token `p_token` gets `p_lease_ms` more from now, on the server's clock. 1 renewed, 0 fenced
-- out: the row is completed, held by a later claim, or gone (released, forgotten, or swept after
-- its lease lapsed). A lapsed row still holding the token is renewed: nobody claimed since (a
-- claim writes its own token). A completed row is never touched. The remote tier's holders and
-- any other lease holder of the schema use it alike.
CREATE OR REPLACE FUNCTION __SCHEMA__.renew(
    p_digest bytea, p_key bigint, p_token bigint, p_lease_ms bigint, p_lock_ms integer
) RETURNS smallint
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('lock_timeout', p_lock_ms::text, true);
    PERFORM pg_advisory_xact_lock(p_key);
    UPDATE __SCHEMA__.records x
       SET expires_at = clock_timestamp() + p_lease_ms * interval '1 millisecond'
     WHERE x.digest = p_digest AND x.token = p_token AND x.state = 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    RETURN 1;
END $$;

-- Transactional claim (D4 b), run inside the caller's transaction: waits up to `p_wait_ms` for
-- the scope's lock (another transaction of the same scope commits or rolls back), then reads
-- the record with a fresh snapshot. Outcomes: 0 claimed (token; the lock is held until this
-- transaction ends), 1 in flight under a remote-tier claim (holder, lease left), 2 completed
-- (result), 3 conflict. `p_idle_ms` > 0 bounds how long this transaction may sit idle: past it
-- the server ends the session and the transaction rolls back (a stalled holder's lease).
CREATE OR REPLACE FUNCTION __SCHEMA__.tx_claim(
    p_digest bytea, p_key bigint, p_fp bytea, p_wait_ms integer, p_idle_ms integer
) RETURNS TABLE (outcome smallint, token bigint, lease_left_ms bigint, result bytea)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    t_now timestamptz;
    old_lock_timeout text;
BEGIN
    -- Uncontended (the common case): no lock_timeout to set and restore.
    IF NOT pg_try_advisory_xact_lock(p_key) THEN
        old_lock_timeout := current_setting('lock_timeout');
        PERFORM set_config('lock_timeout', p_wait_ms::text, true);
        PERFORM pg_advisory_xact_lock(p_key);
        PERFORM set_config('lock_timeout', old_lock_timeout, true);
    END IF;
    IF p_idle_ms > 0 THEN
        PERFORM set_config('idle_in_transaction_session_timeout', p_idle_ms::text, true);
    END IF;
    t_now := clock_timestamp();
    SELECT x.fingerprint, x.state, x.token, x.result, x.expires_at INTO r
      FROM __SCHEMA__.records x WHERE x.digest = p_digest;
    IF FOUND AND r.expires_at > t_now THEN
        IF r.fingerprint <> p_fp THEN
            RETURN QUERY SELECT 3::smallint, r.token, 0::bigint, NULL::bytea;
            RETURN;
        END IF;
        IF r.state = 2 THEN
            RETURN QUERY SELECT 2::smallint, r.token, 0::bigint, r.result;
            RETURN;
        END IF;
        RETURN QUERY SELECT 1::smallint, r.token,
            ceil(extract(epoch FROM r.expires_at - t_now) * 1000)::bigint, NULL::bytea;
        RETURN;
    END IF;
    RETURN QUERY SELECT 0::smallint, nextval('__SCHEMA__.fence'), 0::bigint, NULL::bytea;
END $$;

-- Transactional record (D4 b), run in the claimed transaction right before its COMMIT: writes
-- the completed record with the claim's token. Raises (SQLSTATE ID001) if a record with a later
-- token exists, so the COMMIT that follows in the same query string is skipped and the whole
-- transaction rolls back (under the scope's lock this cannot happen; it is a safety net).
CREATE OR REPLACE FUNCTION __SCHEMA__.tx_finish(
    p_digest bytea, p_fp bytea, p_token bigint, p_owner bytea, p_value bytea, p_ttl_ms bigint
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t_now timestamptz := clock_timestamp();
BEGIN
    INSERT INTO __SCHEMA__.records AS x
        (digest, fingerprint, state, token, owner, result, awaited, created_at, expires_at)
    VALUES (p_digest, p_fp, 2, p_token, p_owner, p_value, false, t_now,
            t_now + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (digest) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, state = 2, token = EXCLUDED.token,
        owner = EXCLUDED.owner, result = EXCLUDED.result, awaited = false,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
    WHERE x.token < EXCLUDED.token;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a later record of this scope exists: this transaction rolls back'
            USING ERRCODE = 'ID001';
    END IF;
END $$;
