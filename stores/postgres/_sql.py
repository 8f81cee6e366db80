"""The SQL of PostgresStore: its schema, server-side write functions and queries.

Every write is one round trip, one transaction: the conversation's row is locked, the
position, idempotency and revision checks run under that lock, and the primary key
(ref, position) refuses any fork a bug might still attempt. `{s}` is the store's schema
(a checked identifier, quoted).

An append is the hot path, so it costs few index updates and little server work: its
common case (a live conversation, the expected position, a new batch) is APPEND_FAST,
one plain statement whose conditional UPDATE takes the row lock and checks the first
two, then inserts the batch id (whose primary key refuses a batch already committed)
and the messages; every other case is a second round trip, a call of the PL/pgSQL
`append`; every 32nd revision a short DELETE trims the batch ids. The conversation's
row is updated in place (HOT: `fillfactor` leaves room, and no index covers a column
that every append changes: `touched`, the indexed write time, moves in 64 s steps).
"""

from __future__ import annotations

from .._base import MAX_BATCH_IDS

SCHEMA_VERSION = 1  # the schema never shipped before this layout: still version 1
TRIM_EVERY = 32  # batch ids are trimmed every 32 revisions, as SQLite does

# Serialises schema creation across processes (CREATE ... IF NOT EXISTS races otherwise).
LOCK = "SELECT pg_advisory_xact_lock(hashtext('raygent-schema:' || %s))"
VERSION_TABLE = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer NOT NULL)
"""
VERSIONS = "SELECT version FROM {s}.schema_version"
SET_VERSION = "INSERT INTO {s}.schema_version (version) VALUES (%s)"

# Cached values (raygent.ResponseCache): created on every first use (IF NOT EXISTS), so
# a schema made before it gains it with no version change.
CACHE_TABLE = """
CREATE TABLE IF NOT EXISTS {s}.cache (
    namespace text NOT NULL,
    key text NOT NULL,
    value bytea NOT NULL,
    expires_at float8,
    PRIMARY KEY (namespace, key)
)
"""
CACHE_GET = """
SELECT value FROM {s}.cache
WHERE namespace = %s AND key = %s AND (expires_at IS NULL OR expires_at > %s)
"""
CACHE_PUT = """
INSERT INTO {s}.cache (namespace, key, value, expires_at) VALUES (%s, %s, %s, %s)
ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at
"""
CACHE_PRUNE = "DELETE FROM {s}.cache WHERE expires_at <= %s"

# Timings (raygent.batch(..., deadline=) learns from them), created like the cache table.
TIMINGS_TABLE = """
CREATE TABLE IF NOT EXISTS {s}.timings (
    id bigserial PRIMARY KEY,
    key text NOT NULL,
    way text NOT NULL,
    seconds float8 NOT NULL,
    ok boolean NOT NULL,
    at float8 NOT NULL
);
CREATE INDEX IF NOT EXISTS timings_key ON {s}.timings (key, id)
"""
TIMINGS_ADD = "INSERT INTO {s}.timings (key, way, seconds, ok, at) VALUES (%s, %s, %s, %s, %s)"
TIMINGS_TRIM = """
DELETE FROM {s}.timings WHERE key = %(key)s AND id <= (
    SELECT id FROM {s}.timings WHERE key = %(key)s ORDER BY id DESC LIMIT 1 OFFSET %(keep)s)
"""
TIMINGS_GET = (
    "SELECT way, seconds, ok, at FROM {s}.timings WHERE key = %s ORDER BY id DESC LIMIT %s"
)

TABLES = """
CREATE TABLE {s}.conversations (
    ref text PRIMARY KEY,
    session_id text NOT NULL,
    user_id text,
    metadata text NOT NULL,
    revision bigint NOT NULL,
    length bigint NOT NULL,
    updated_at float8 NOT NULL,
    touched float8 NOT NULL  -- floor(updated_at / 64): indexed for list and prune
) WITH (fillfactor = 50);
CREATE INDEX conversations_touched ON {s}.conversations (touched);
CREATE TABLE {s}.messages (
    ref text NOT NULL,
    position bigint NOT NULL,
    run_id text NOT NULL,
    turn bigint NOT NULL,
    created_at float8 NOT NULL,
    payload bytea NOT NULL,
    PRIMARY KEY (ref, position)
);
CREATE TABLE {s}.batches (
    ref text NOT NULL,
    batch_id bytea NOT NULL,
    first_position bigint NOT NULL,
    seq bigint NOT NULL,
    PRIMARY KEY (ref, batch_id)
);
CREATE TABLE {s}.errors (
    id bigserial PRIMARY KEY,
    ref text NOT NULL,
    record bytea NOT NULL
);
CREATE INDEX errors_ref ON {s}.errors (ref, id);
CREATE TABLE {s}.runs (
    ref text PRIMARY KEY,
    epoch bigint NOT NULL,
    header bytea NOT NULL,
    entries bigint NOT NULL,
    outcome bytea,
    updated_at float8 NOT NULL
);
CREATE INDEX runs_updated ON {s}.runs (updated_at);
CREATE TABLE {s}.run_entries (
    ref text NOT NULL,
    seq bigint NOT NULL,
    entry bytea NOT NULL,
    PRIMARY KEY (ref, seq)
);

-- The conversation's (revision, length, created) under a row lock; created when absent,
-- emptied first when expired (a write after expiry starts a fresh conversation).
CREATE FUNCTION {s}.lock_conversation(
    p_ref text, p_session text, p_user text, p_meta text, p_now float8, p_since float8,
    OUT rev bigint, OUT len bigint, OUT created boolean
) LANGUAGE plpgsql AS $$
DECLARE at float8;
BEGIN
  created := false;
  SELECT c.revision, c.length, c.updated_at INTO rev, len, at
    FROM {s}.conversations c WHERE c.ref = p_ref FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO {s}.conversations
      VALUES (p_ref, p_session, p_user, p_meta, 0, 0, p_now, floor(p_now / 64))
      ON CONFLICT (ref) DO NOTHING;
    created := FOUND;
    SELECT c.revision, c.length, c.updated_at INTO rev, len, at
      FROM {s}.conversations c WHERE c.ref = p_ref FOR UPDATE;
  END IF;
  IF at < p_since THEN
    DELETE FROM {s}.messages m WHERE m.ref = p_ref;
    DELETE FROM {s}.batches b WHERE b.ref = p_ref;
    DELETE FROM {s}.errors e WHERE e.ref = p_ref;
    rev := 0;
    len := 0;
  END IF;
END $$;

-- -> first * 4 + 0 written | first * 4 + 1 duplicate | length * 4 + 2 position conflict
-- (one bigint: cheaper to send and parse than an array, on the hot path)
CREATE FUNCTION {s}.append(
    p_ref text, p_session text, p_user text, p_meta text, p_now float8, p_since float8,
    p_batch bytea, p_expected bigint, p_run text, p_turn bigint, p_payloads bytea[]
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  rev bigint; len bigint; at float8; first bigint; created boolean := false;
  n bigint := cardinality(p_payloads);
BEGIN
  -- The common case in one statement, which also takes the row lock: a live
  -- conversation, at the expected position, and a batch not seen before.
  UPDATE {s}.conversations c SET session_id = p_session, user_id = p_user,
    metadata = p_meta, revision = c.revision + 1, length = c.length + n,
    updated_at = p_now, touched = floor(p_now / 64)
    WHERE c.ref = p_ref AND c.updated_at >= p_since
      AND (p_expected IS NULL OR c.length = p_expected)
      AND NOT EXISTS (SELECT 1 FROM {s}.batches b WHERE b.ref = p_ref AND b.batch_id = p_batch)
    RETURNING c.revision, c.length - n INTO rev, first;
  IF NOT FOUND THEN  -- absent, expired, a duplicate or a conflict: decided under the lock
    SELECT c.revision, c.length, c.updated_at INTO rev, len, at
      FROM {s}.conversations c WHERE c.ref = p_ref FOR UPDATE;
    IF NOT FOUND THEN
      INSERT INTO {s}.conversations
        VALUES (p_ref, p_session, p_user, p_meta, 0, 0, p_now, floor(p_now / 64))
        ON CONFLICT (ref) DO NOTHING;
      created := FOUND;
      SELECT c.revision, c.length, c.updated_at INTO rev, len, at
        FROM {s}.conversations c WHERE c.ref = p_ref FOR UPDATE;
    END IF;
    IF at < p_since THEN  -- expired: a write after expiry starts a fresh conversation
      DELETE FROM {s}.messages m WHERE m.ref = p_ref;
      DELETE FROM {s}.batches b WHERE b.ref = p_ref;
      DELETE FROM {s}.errors e WHERE e.ref = p_ref;
      rev := 0;
      len := 0;
    ELSE
      SELECT b.first_position INTO first FROM {s}.batches b
        WHERE b.ref = p_ref AND b.batch_id = p_batch;
      IF FOUND THEN RETURN first * 4 + 1; END IF;
    END IF;
    IF p_expected IS NOT NULL AND p_expected <> len THEN
      IF created THEN DELETE FROM {s}.conversations c WHERE c.ref = p_ref; END IF;
      RETURN len * 4 + 2;
    END IF;
    rev := rev + 1;
    first := len;
    UPDATE {s}.conversations c SET session_id = p_session, user_id = p_user,
      metadata = p_meta, revision = rev, length = len + n,
      updated_at = p_now, touched = floor(p_now / 64)
      WHERE c.ref = p_ref;
  END IF;
  INSERT INTO {s}.batches VALUES (p_ref, p_batch, first, rev) ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    -- The same batch committed while the UPDATE above waited for the row lock (its
    -- NOT EXISTS saw the older snapshot): undo the counters, report the duplicate.
    UPDATE {s}.conversations c SET revision = rev - 1, length = first WHERE c.ref = p_ref;
    SELECT b.first_position INTO first FROM {s}.batches b
      WHERE b.ref = p_ref AND b.batch_id = p_batch;
    RETURN first * 4 + 1;
  END IF;
  INSERT INTO {s}.messages
    SELECT p_ref, first + t.o - 1, p_run, p_turn, p_now, t.p
    FROM unnest(p_payloads) WITH ORDINALITY AS t(p, o);
  IF rev % {trim_every} = 0 THEN
    DELETE FROM {s}.batches b WHERE b.ref = p_ref AND b.seq <= rev - {keep};
  END IF;
  RETURN first * 4;
END $$;

CREATE FUNCTION {s}.record_error(
    p_ref text, p_session text, p_user text, p_meta text, p_now float8, p_since float8,
    p_record bytea, p_cap bigint
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE cur record;
BEGIN
  SELECT * INTO cur FROM {s}.lock_conversation(p_ref, p_session, p_user, p_meta, p_now, p_since);
  INSERT INTO {s}.errors (ref, record) VALUES (p_ref, p_record);
  DELETE FROM {s}.errors e WHERE e.ref = p_ref AND e.id <= (
    SELECT x.id FROM {s}.errors x WHERE x.ref = p_ref ORDER BY x.id DESC
    LIMIT 1 OFFSET p_cap);
  UPDATE {s}.conversations c SET session_id = p_session, user_id = p_user,
    metadata = p_meta, revision = cur.rev, length = cur.len, updated_at = p_now,
    touched = floor(p_now / 64)
    WHERE c.ref = p_ref;
END $$;

-- -> {{1, length}} committed | {{0, length}} revision conflict | {{-1, length}} bad count
CREATE FUNCTION {s}.replace_prefix(
    p_ref text, p_session text, p_user text, p_meta text, p_now float8, p_since float8,
    p_revision bigint, p_count bigint, p_run text, p_turn bigint, p_payloads bytea[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE cur record; delta bigint := cardinality(p_payloads) - p_count;
BEGIN
  SELECT * INTO cur FROM {s}.lock_conversation(p_ref, p_session, p_user, p_meta, p_now, p_since);
  IF cur.rev <> p_revision OR p_count < 0 OR p_count > cur.len THEN
    IF cur.created THEN DELETE FROM {s}.conversations c WHERE c.ref = p_ref; END IF;
    RETURN ARRAY[CASE WHEN cur.rev <> p_revision THEN 0 ELSE -1 END, cur.len];
  END IF;
  DELETE FROM {s}.messages m WHERE m.ref = p_ref AND m.position < p_count;
  -- Via negative positions: shifting in place could collide on the primary key.
  UPDATE {s}.messages m SET position = -1 - (m.position + delta) WHERE m.ref = p_ref;
  UPDATE {s}.messages m SET position = -1 - m.position WHERE m.ref = p_ref;
  INSERT INTO {s}.messages
    SELECT p_ref, t.o - 1, p_run, p_turn, p_now, t.p
    FROM unnest(p_payloads) WITH ORDINALITY AS t(p, o);
  UPDATE {s}.batches b SET first_position = CASE WHEN b.first_position >= p_count
    THEN b.first_position + delta ELSE 0 END WHERE b.ref = p_ref;
  UPDATE {s}.conversations c SET session_id = p_session, user_id = p_user,
    metadata = p_meta, revision = cur.rev + 1, length = cur.len + delta, updated_at = p_now,
    touched = floor(p_now / 64)
    WHERE c.ref = p_ref;
  RETURN ARRAY[1, cur.len];
END $$
"""

TABLES = TABLES.replace("{trim_every}", str(TRIM_EVERY)).replace("{keep}", str(MAX_BATCH_IDS))

_SCOPE = "%s, %s, %s, %s, %s::float8, %s::float8"
# Binary parameters (%b) for the payloads: no hex text for psycopg to escape and the
# server to parse.
APPEND = f"SELECT {{s}}.append({_SCOPE}, %b::bytea, %s::bigint, %s, %s::bigint, %b::bytea[])"
# An append's common case as one plain statement (no PL/pgSQL call): a live conversation
# at the expected position. The UPDATE takes the row lock and checks both; no row back
# means another case (absent, expired, a position conflict, or a retry with a stale
# position), which `append` above decides. A batch already committed is found by the
# batch id's primary key, not looked up first (a retry is rare, a probe on every append
# is not): the INSERT fails the whole statement, nothing is written, and `append`
# reports the duplicate. The same holds when the batch committed while the UPDATE
# waited for the lock. Trimming the batch ids is a second statement (APPEND_TRIM), sent
# after every TRIM_EVERY-th revision: kept out of this one, it costs the other 31 nothing.
APPEND_FAST = """
WITH up AS (
    UPDATE {s}.conversations c SET metadata = %(meta)s, revision = c.revision + 1,
        length = c.length + cardinality(%(payloads)b::bytea[]),
        updated_at = %(now)s::float8, touched = floor(%(now)s::float8 / 64)
    WHERE c.ref = %(ref)s AND c.updated_at >= %(since)s::float8
        AND (%(expected)s::bigint IS NULL OR c.length = %(expected)s::bigint)
    RETURNING c.revision AS rev, c.length - cardinality(%(payloads)b::bytea[]) AS first),
b AS (INSERT INTO {s}.batches SELECT %(ref)s, %(batch)b::bytea, first, rev FROM up),
m AS (INSERT INTO {s}.messages
    SELECT %(ref)s, up.first + t.o - 1, %(run)s, %(turn)s::bigint, %(now)s::float8, t.p
    FROM up, unnest(%(payloads)b::bytea[]) WITH ORDINALITY AS t(p, o))
SELECT first, rev FROM up
"""
# The batch ids older than the newest MAX_BATCH_IDS revisions (as `append` trims them).
APPEND_TRIM = f"DELETE FROM {{s}}.batches WHERE ref = %s AND seq <= %s::bigint - {MAX_BATCH_IDS}"
RECORD_ERROR = f"SELECT {{s}}.record_error({_SCOPE}, %s::bytea, %s::bigint)"
REPLACE_PREFIX = (
    f"SELECT {{s}}.replace_prefix({_SCOPE}, %s::bigint, %s::bigint, %s, %s::bigint, %b::bytea[])"
)

LOAD = """
SELECT m.position, m.payload FROM {s}.messages m JOIN {s}.conversations c ON c.ref = m.ref
WHERE m.ref = %s AND c.updated_at >= %s ORDER BY m.position
"""
# One statement: the revision and the rows come from one snapshot.
SNAPSHOT = """
SELECT c.revision, m.position, m.payload FROM {s}.conversations c
LEFT JOIN {s}.messages m ON m.ref = c.ref
WHERE c.ref = %s AND c.updated_at >= %s ORDER BY m.position
"""
ERRORS = """
SELECT e.record FROM {s}.errors e JOIN {s}.conversations c ON c.ref = e.ref
WHERE e.ref = %s AND c.updated_at >= %s ORDER BY e.id
"""
LIST = """
SELECT ref, session_id, user_id, metadata, length, updated_at FROM {s}.conversations
WHERE touched >= floor(%(since)s / 64) AND updated_at >= %(since)s
  AND (%(user)s::text IS NULL OR user_id = %(user)s::text)
ORDER BY touched DESC, updated_at DESC LIMIT %(limit)s
"""
GET = """
SELECT m.position, m.run_id, m.turn, m.created_at, m.payload
FROM {s}.messages m JOIN {s}.conversations c ON c.ref = m.ref
WHERE m.ref = %s AND c.updated_at >= %s ORDER BY m.position
"""
CLEAR = """
WITH m AS (DELETE FROM {s}.messages WHERE ref = %(ref)s),
b AS (DELETE FROM {s}.batches WHERE ref = %(ref)s),
e AS (DELETE FROM {s}.errors WHERE ref = %(ref)s)
DELETE FROM {s}.conversations WHERE ref = %(ref)s
"""
# A chunk of conversations last written before the cutoff, with all their rows.
PRUNE = """
WITH gone AS (
    DELETE FROM {s}.conversations WHERE ref IN (
        SELECT ref FROM {s}.conversations
        WHERE touched <= floor(%(cutoff)s / 64) AND updated_at < %(cutoff)s
        LIMIT %(chunk)s FOR UPDATE SKIP LOCKED)
    RETURNING ref),
m AS (DELETE FROM {s}.messages WHERE ref IN (SELECT ref FROM gone)),
b AS (DELETE FROM {s}.batches WHERE ref IN (SELECT ref FROM gone)),
e AS (DELETE FROM {s}.errors WHERE ref IN (SELECT ref FROM gone))
SELECT count(*) FROM gone
"""

# -- durable runs: a row per run, keyed by ref, and a row per entry, keyed (ref, seq).
# Each write is one statement whose UPDATE is conditional on the epoch (and a live run).
_LIVE = "updated_at >= %(since)s"
RUN_DROP_EXPIRED = """
WITH old AS (DELETE FROM {s}.runs WHERE ref = %(ref)s AND updated_at < %(since)s RETURNING ref)
DELETE FROM {s}.run_entries WHERE ref IN (SELECT ref FROM old)
"""
RUN_START = """
INSERT INTO {s}.runs VALUES (%(ref)s, %(epoch)s, %(header)s, 0, NULL, %(now)s)
ON CONFLICT (ref) DO NOTHING RETURNING epoch
"""
RUN_APPEND = f"""
WITH up AS (
    UPDATE {{s}}.runs SET entries = entries + 1, updated_at = %(now)s
    WHERE ref = %(ref)s AND epoch = %(epoch)s AND entries = %(seq)s
      AND outcome IS NULL AND {_LIVE}
    RETURNING ref)
INSERT INTO {{s}}.run_entries SELECT ref, %(seq)s, %(entry)s FROM up RETURNING 1
"""
# A live run's epoch, entry count, whether finished, and its entry at %(seq)s.
RUN_STATE = f"""
SELECT r.epoch, r.entries, r.outcome IS NOT NULL,
       (SELECT e.entry FROM {{s}}.run_entries e WHERE e.ref = r.ref AND e.seq = %(seq)s)
FROM {{s}}.runs r WHERE r.ref = %(ref)s AND r.{_LIVE}
"""
RUN_CLAIM = f"""
UPDATE {{s}}.runs SET epoch = epoch + 1, updated_at = %(now)s
WHERE ref = %(ref)s AND epoch = %(epoch)s AND {_LIVE} RETURNING epoch
"""
RUN_LOAD = """
SELECT r.epoch, r.header, r.outcome, r.updated_at, e.entry
FROM {s}.runs r LEFT JOIN {s}.run_entries e ON e.ref = r.ref
WHERE r.ref = %(ref)s AND r.updated_at >= %(since)s ORDER BY e.seq
"""
RUN_FINISH = f"""
WITH up AS (
    UPDATE {{s}}.runs SET outcome = %(outcome)s, updated_at = %(now)s,
        entries = CASE WHEN %(drop)s THEN 0 ELSE entries END
    WHERE ref = %(ref)s AND epoch = %(epoch)s AND {_LIVE} RETURNING ref),
d AS (DELETE FROM {{s}}.run_entries WHERE %(drop)s AND ref IN (SELECT ref FROM up))
SELECT count(*) FROM up
"""
# A chunk of runs last written before the cutoff, with their entries.
PRUNE_RUNS = """
WITH gone AS (
    DELETE FROM {s}.runs WHERE ref IN (
        SELECT ref FROM {s}.runs WHERE updated_at < %(cutoff)s
        LIMIT %(chunk)s FOR UPDATE SKIP LOCKED)
    RETURNING ref),
x AS (DELETE FROM {s}.run_entries WHERE ref IN (SELECT ref FROM gone))
SELECT count(*) FROM gone
"""
RUN_DELETE = """
WITH d AS (DELETE FROM {s}.run_entries WHERE ref = %(ref)s)
DELETE FROM {s}.runs WHERE ref = %(ref)s
"""
