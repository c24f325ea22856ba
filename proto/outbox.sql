-- outbox.sql - the transactional outbox of MIC in the application's own
-- PostgreSQL (13 or later; tested on 15).  DESIGN §14; the relay that
-- publishes its committed rows to micd is client/mic-relay.c.
--
-- The application writes its business change and its event in ONE
-- transaction of its own database:
--
--     BEGIN;
--     UPDATE orders SET status = 'confirmed' WHERE id = 204;
--     SELECT * FROM mic_outbox_append('orders', 'order', '204', 'order.confirmed',
--                                     '{"order_id":204}'::jsonb);
--     COMMIT;
--
-- If the transaction rolls back, the event was never there and its version
-- is not used; once it commits, mic-relay publishes it (at least once; micd
-- keeps it once, by its event_id).
--
-- Applying this file is idempotent: run it again after an upgrade.  On a
-- table mic_outbox made by an earlier version of this file, the
-- ALTER TABLE ... ADD COLUMN IF NOT EXISTS lines add what is missing, with
-- its default, without touching the rows; nothing is ever dropped.  Apply
-- it in a transaction of its own (psql -1 -f proto/outbox.sql) by a role
-- that may create tables and functions in the schema the application uses.
--
-- Version allocation takes a row lock on the aggregate's row of
-- mic_outbox_versions (INSERT ... ON CONFLICT DO UPDATE), never an
-- unlocked MAX(version) + 1: concurrent transactions appending to one
-- aggregate queue on that row, each gets the next version, and a
-- transaction that rolls back gives its version back with its increment.
-- Use it at READ COMMITTED (PostgreSQL's default); at REPEATABLE READ or
-- SERIALIZABLE a second writer of the same aggregate gets a serialization
-- failure and must retry its transaction, as with any row both update.

-- The IF NOT EXISTS clauses below would each say NOTICE ... skipping.
SET client_min_messages = warning;

CREATE TABLE IF NOT EXISTS mic_outbox (
    id                bigserial PRIMARY KEY,
    event_id          text NOT NULL UNIQUE,
    topic             text NOT NULL,
    aggregate_type    text,
    aggregate_id      text,
    aggregate_version bigint,
    schema_version    int NOT NULL DEFAULT 1,
    event_type        text,
    correlation_id    text,
    priority          smallint NOT NULL DEFAULT 0,
    headers           jsonb,
    payload           jsonb,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    status            text NOT NULL DEFAULT 'pending',
    attempts          int NOT NULL DEFAULT 0,
    not_before        timestamptz,
    lease_token       uuid,
    lease_expires_at  timestamptz,
    last_error        text,
    dispatched_at     timestamptz
);

-- An earlier table: add what it lacks (no-ops on a table made above).
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS aggregate_type    text;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS aggregate_id      text;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS aggregate_version bigint;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS schema_version    int NOT NULL DEFAULT 1;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS event_type        text;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS correlation_id    text;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS priority          smallint NOT NULL DEFAULT 0;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS headers           jsonb;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS payload           jsonb;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS created_at        timestamptz NOT NULL DEFAULT clock_timestamp();
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS status            text NOT NULL DEFAULT 'pending';
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS attempts          int NOT NULL DEFAULT 0;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS not_before        timestamptz;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS lease_token       uuid;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS lease_expires_at  timestamptz;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS last_error        text;
ALTER TABLE mic_outbox ADD COLUMN IF NOT EXISTS dispatched_at     timestamptz;

-- The states a row goes through (DESIGN §14): pending -> processing ->
-- dispatched, or back to pending with not_before, or dlq.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'mic_outbox_status_check'
                   AND conrelid = 'mic_outbox'::regclass) THEN
        ALTER TABLE mic_outbox ADD CONSTRAINT mic_outbox_status_check
            CHECK (status IN ('pending', 'processing', 'dispatched', 'dlq'));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'mic_outbox_aggregate_check'
                   AND conrelid = 'mic_outbox'::regclass) THEN
        -- an aggregate is both names or neither; a version needs one
        ALTER TABLE mic_outbox ADD CONSTRAINT mic_outbox_aggregate_check
            CHECK ((aggregate_type IS NULL) = (aggregate_id IS NULL)
                   AND (aggregate_version IS NULL OR aggregate_type IS NOT NULL));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'mic_outbox_aggregate_version_key'
                   AND conrelid = 'mic_outbox'::regclass) THEN
        ALTER TABLE mic_outbox ADD CONSTRAINT mic_outbox_aggregate_version_key
            UNIQUE (aggregate_type, aggregate_id, aggregate_version);
    END IF;
END $$;

-- The seed's index for ordered mode: an aggregate's oldest non-terminal row.
CREATE INDEX IF NOT EXISTS mic_outbox_aggregate_idx
    ON mic_outbox (aggregate_type, aggregate_id, status, created_at, id);

-- The relay's claim: live rows by (priority desc, id).  Partial, so
-- dispatched rows kept for audit cost the claim nothing.
CREATE INDEX IF NOT EXISTS mic_outbox_claim_idx
    ON mic_outbox (priority DESC, id) WHERE status IN ('pending', 'processing');

-- The last version allocated per aggregate.
CREATE TABLE IF NOT EXISTS mic_outbox_versions (
    aggregate_type text   NOT NULL,
    aggregate_id   text   NOT NULL,
    last_version   bigint NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);

-- A UUIDv7 (RFC 9562) as text: 48 bits of Unix time in milliseconds, the
-- version (7), 12 bits of the microseconds within that millisecond (the
-- RFC's method 3, section 6.2), then random bits with the RFC's variant.
-- So ids made in different microseconds sort in the order they were made
-- (clock_timestamp(), which moves within a transaction), also within one
-- millisecond; two made in one microsecond are in random order.
CREATE OR REPLACE FUNCTION mic_outbox_uuidv7() RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b   bytea  := uuid_send(gen_random_uuid());   -- version 4: variant bits set
    us  bigint := floor(extract(epoch FROM clock_timestamp()) * 1000000);
    sub int    := (us % 1000) * 4096 / 1000;      -- the microseconds, as 12 bits
BEGIN
    b := overlay(b PLACING substring(int8send(us / 1000) FROM 3 FOR 6) FROM 1 FOR 6);
    b := set_byte(b, 6, 112 | (sub >> 8));        -- version nibble 7, then sub
    b := set_byte(b, 7, sub & 255);
    RETURN encode(b, 'hex')::uuid::text;
END $$;

-- Append an event inside the caller's transaction.  For an aggregate,
-- allocates its next version under the row lock of mic_outbox_versions;
-- without aggregate_type and aggregate_id the event has no version.  An
-- event_id of NULL gets a UUIDv7.  Returns the event's id and version.
-- priority is smallint: pass a literal as 5::smallint, or by name
-- (priority => 5).  (SQL, not PL/pgSQL, so that the parameter event_id
-- and the result column event_id may share the name DESIGN §14 gives
-- them: the body names parameters by position.)
CREATE OR REPLACE FUNCTION mic_outbox_append(
    topic          text,
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb    DEFAULT NULL,
    priority       smallint DEFAULT 0,
    event_id       text     DEFAULT NULL)
RETURNS TABLE (event_id text, aggregate_version bigint)
LANGUAGE sql VOLATILE AS $$
    WITH version AS (
        INSERT INTO mic_outbox_versions AS v (aggregate_type, aggregate_id, last_version)
        SELECT $2, $3, 1 WHERE $2 IS NOT NULL AND $3 IS NOT NULL
        ON CONFLICT (aggregate_type, aggregate_id)
            DO UPDATE SET last_version = v.last_version + 1
        RETURNING v.last_version)
    INSERT INTO mic_outbox AS o (event_id, topic, aggregate_type, aggregate_id,
                                 aggregate_version, event_type, priority, headers, payload)
    SELECT coalesce($8, mic_outbox_uuidv7()), $1, $2, $3, (SELECT last_version FROM version),
           $4, coalesce($7, 0), $6, $5
    RETURNING o.event_id, o.aggregate_version
$$;

-- Wake the relays (LISTEN mic_outbox) when rows are committed.  One
-- notification per statement; PostgreSQL delivers it at commit and folds
-- identical ones of a transaction into one.  The relays poll as well, so
-- a lost notification only delays.
CREATE OR REPLACE FUNCTION mic_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mic_outbox', '');
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER mic_outbox_notify
    AFTER INSERT ON mic_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION mic_outbox_notify();
