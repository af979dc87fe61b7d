-- Asynchronous embedding: embed.vectorize records changed rows in a queue that background
-- workers embed in batches behind the writes; status, waiting, errors, privileges.
-- requires: vector
CREATE EXTENSION IF NOT EXISTS vector;
\i tests/regress/include/workflow.sql
SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2') ->> 'dim' AS dim;

CREATE TABLE va_articles (id bigint PRIMARY KEY, body text, emb vector(384));
INSERT INTO va_articles SELECT i, 'article number ' || i FROM generate_series(1, 40) i;
INSERT INTO va_articles VALUES (41, NULL);
-- The rows without a vector and with a source are queued; the call returns how many.
SELECT embed.vectorize('va_articles', 'body', 'emb', 'minilm', 8) AS enqueued;
SELECT embed.vectorize_wait('va_articles', 'emb', '60 seconds') AS done;
SELECT count(*) FILTER (WHERE pg_temp.matches(emb::real[], body)) AS embedded, count(*) AS total FROM va_articles;

-- Writes commit at once; the worker embeds inserts and changed sources, clears a vector
-- whose source became NULL, and skips rows deleted meanwhile.
INSERT INTO va_articles VALUES (42, 'a late arrival');
UPDATE va_articles SET body = 'rewritten twice' WHERE id = 1;
UPDATE va_articles SET body = 'rewritten three times' WHERE id = 1;
UPDATE va_articles SET body = NULL WHERE id = 2;
UPDATE va_articles SET id = id WHERE id = 3;
INSERT INTO va_articles VALUES (43, 'deleted before embedding');
DELETE FROM va_articles WHERE id = 43;
SELECT embed.vectorize_wait('va_articles', 'emb', '60 seconds') AS done;
SELECT id, emb IS NULL AS no_vector, pg_temp.matches(emb::real[], body) AS matches
  FROM va_articles WHERE id IN (1, 2, 3, 42) ORDER BY id;

-- The status view: nothing queued, rows done, no errors, a worker.
SELECT tbl, target_column, model, queued, rows_done >= 42 AS rows_done, errors,
       cardinality(worker_pids) >= 1 AS has_worker, lag IS NULL AS no_lag
  FROM embed.vectorize_status;
SELECT count(*) >= 1 AS worker_listed FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize';

-- A row that keeps failing is recorded (and retried with backoff), never blocking the
-- others: a model that refuses long inputs.
SELECT embed.register_model('minilm_strict', 'all-MiniLM-L6-v2', '{"long_input": "error"}') ->> 'dim' AS dim;
CREATE TABLE va_strict (id int PRIMARY KEY, body text, emb vector(384));
INSERT INTO va_strict VALUES (1, 'short'), (2, repeat('long words ', 400)), (3, 'also short');
SELECT embed.vectorize('va_strict', 'body', 'emb', 'minilm_strict', 16) AS enqueued;
SELECT embed.vectorize_wait('va_strict', 'emb', '60 seconds') AS done;
SELECT id, emb IS NOT NULL AS embedded FROM va_strict ORDER BY id;
SELECT tbl, key, model, sqlstate, message ~ 'tokens, more than' AS says_why, attempts >= 3 AS retried
  FROM embed.vectorize_errors;
-- Fixed at the source: queued again, embedded, and its error is gone.
UPDATE va_strict SET body = 'short now' WHERE id = 2;
SELECT embed.vectorize_wait('va_strict', 'emb', '60 seconds') AS done;
SELECT count(*) AS errors_left FROM embed.vectorize_errors;
SELECT id, emb IS NOT NULL AS embedded FROM va_strict ORDER BY id;

-- A model dropped while rows are queued: the vectorizer waits (its rows stay queued, one
-- error names the model), and carries on once the model is registered again.
SELECT embed.drop_model('minilm_strict');
INSERT INTO va_strict VALUES (4, 'queued while the model is gone');
SELECT embed.vectorize_wait('va_strict', 'emb', '2 seconds') AS done_without_model;
SELECT key IS NULL AS whole_vectorizer, sqlstate, message FROM embed.vectorize_errors;
SELECT embed.register_model('minilm_strict', 'all-MiniLM-L6-v2', '{"long_input": "error"}') ->> 'dim' AS dim;
SELECT embed.vectorize_wait('va_strict', 'emb', '60 seconds') AS done;
SELECT count(*) AS errors_left FROM embed.vectorize_errors;
SELECT id, emb IS NOT NULL AS embedded FROM va_strict WHERE id = 4;

-- Bad calls.
CREATE TABLE va_nokey (body text, emb vector(384));
SELECT pg_temp.err($$SELECT embed.vectorize('va_nokey', 'body', 'emb', 'minilm')$$);
SELECT pg_temp.err($$SELECT embed.vectorize('va_articles', 'body', 'emb', 'minilm', 0)$$);
SELECT pg_temp.err($$SELECT embed.vectorize('va_articles', 'nope', 'emb', 'minilm')$$);
SELECT pg_temp.err($$SELECT embed.vectorize_wait('va_nokey', 'emb', '1 second')$$);
SELECT pg_temp.err($$SELECT embed.vectorize_wait('va_articles', 'emb', NULL)$$);
SELECT pg_temp.err($$SELECT embed.vectorize(NULL, 'body', 'emb', 'minilm')$$);
SELECT pg_temp.err($$SELECT embed.unvectorize('va_nokey', 'emb')$$);

-- Privileges: a role that owns neither the table nor embed_admin may not vectorize it; the
-- table's owner may, and the worker writes as that owner.
CREATE ROLE regress_vec_owner;
CREATE ROLE regress_vec_other;
CREATE TABLE va_owned (id int PRIMARY KEY, body text, emb vector(384));
ALTER TABLE va_owned OWNER TO regress_vec_owner;
SET ROLE regress_vec_other;
SELECT pg_temp.err($$SELECT embed.vectorize('va_owned', 'body', 'emb', 'minilm')$$);
RESET ROLE;
SET ROLE regress_vec_owner;
SELECT embed.vectorize('va_owned', 'body', 'emb', 'minilm') AS enqueued;
INSERT INTO va_owned VALUES (1, 'written by the owner');
SELECT embed.vectorize_wait('va_owned', 'emb', '60 seconds') AS done;
SELECT queued, errors FROM embed.vectorize_status WHERE tbl = 'va_owned'::regclass;
SELECT pg_temp.err($$SELECT count(*) FROM embed.vectorize_queue$$);
RESET ROLE;
SELECT owner FROM embed.vectorizers WHERE tbl = 'va_owned'::regclass;
SELECT id, pg_temp.matches(emb::real[], body) AS matches FROM va_owned;

-- Keys are queued in a form no session setting changes: dates written under DMY and SQL
-- styles, in another time zone, are read back as the dates they are.
CREATE TABLE va_dates (k date PRIMARY KEY, body text, emb vector(384));
SELECT embed.vectorize('va_dates', 'body', 'emb', 'minilm') AS enqueued;
SET DateStyle = 'SQL, DMY';
SET TimeZone = 'Pacific/Chatham';
INSERT INTO va_dates VALUES ('2024-07-04', 'fourth of july'), ('2024-12-25', 'christmas'), ('2024-01-02', 'second of january');
SELECT key FROM embed.vectorize_queue q JOIN embed.vectorizers v ON v.id = q.vectorizer
 WHERE v.tbl = 'va_dates'::regclass ORDER BY key;
RESET DateStyle;
RESET TimeZone;
-- A key changed by UPDATE is queued under its new value; so is a row inserted and re-keyed
-- in one transaction.
UPDATE va_dates SET k = '2025-07-04', body = 'the fourth, a year later' WHERE k = '2024-07-04';
BEGIN;
INSERT INTO va_dates VALUES ('2026-02-02', 'inserted');
UPDATE va_dates SET k = '2026-03-03' WHERE k = '2026-02-02';
COMMIT;
SELECT embed.vectorize_wait('va_dates', 'emb', '60 seconds') AS done;
SELECT k, pg_temp.matches(emb::real[], body) AS matches FROM va_dates ORDER BY k;
SELECT count(*) AS errors FROM embed.vectorize_errors e JOIN embed.vectorizers v ON v.id = e.vectorizer
 WHERE v.tbl = 'va_dates'::regclass;

-- DDL: renames are followed; dropping a vectorized column or the triggers is refused;
-- DROP TABLE takes the vectorizer.
ALTER TABLE va_dates RENAME COLUMN body TO note;
ALTER TABLE va_dates RENAME TO va_days;
SELECT tbl, source_column, key_column, target_column FROM embed.vectorizers WHERE tbl = 'va_days'::regclass;
UPDATE va_days SET note = 'renamed and rewritten' WHERE k = '2024-12-25';
SELECT embed.vectorize_wait('va_days', 'emb', '60 seconds') AS done;
SELECT k, pg_temp.matches(emb::real[], note) AS matches FROM va_days WHERE k = '2024-12-25';
SELECT pg_temp.err($$ALTER TABLE va_days DROP COLUMN note$$);
SELECT pg_temp.err($$ALTER TABLE va_days DROP COLUMN emb$$);
SELECT pg_temp.err($$DROP TRIGGER pg_embed_vectorize_$$ || (SELECT id FROM embed.vectorizers WHERE tbl = 'va_days'::regclass) || $$_ins ON va_days$$);
ALTER TABLE va_days ADD COLUMN extra int;
ALTER TABLE va_days DROP COLUMN extra;
DROP TABLE va_days;
SELECT count(*) AS vectorizers_of_dropped_tables FROM embed.vectorizers WHERE tbl::text ~ '^[0-9]+$';

-- Partitions: rows inserted straight into a partition are embedded, a partition attached
-- later is covered (its rows queued), a detached one is not; a partition cannot be
-- vectorized alone, nor a vectorized table attached as a partition.
CREATE TABLE va_parts (id int PRIMARY KEY, body text, emb vector(384)) PARTITION BY RANGE (id);
CREATE TABLE va_parts_1 PARTITION OF va_parts FOR VALUES FROM (1) TO (100);
SELECT embed.vectorize('va_parts', 'body', 'emb', 'minilm') AS enqueued;
INSERT INTO va_parts VALUES (1, 'through the parent');
INSERT INTO va_parts_1 VALUES (2, 'straight into the partition');
CREATE TABLE va_parts_2 (id int PRIMARY KEY, body text, emb vector(384));
INSERT INTO va_parts_2 VALUES (100, 'in a table attached later'), (101, NULL);
ALTER TABLE va_parts ATTACH PARTITION va_parts_2 FOR VALUES FROM (100) TO (200);
INSERT INTO va_parts_2 VALUES (102, 'into the attached partition');
SELECT embed.vectorize_wait('va_parts', 'emb', '60 seconds') AS done;
SELECT id, emb IS NULL AS no_vector, pg_temp.matches(emb::real[], body) AS matches FROM va_parts ORDER BY id;
SELECT tgrelid::regclass AS partition_with_triggers, count(*) FROM pg_trigger
 WHERE tgname LIKE 'pg_embed_vectorize_%' AND tgrelid::regclass::text LIKE 'va_parts%' GROUP BY 1 ORDER BY 1;
ALTER TABLE va_parts DETACH PARTITION va_parts_2;
SELECT count(*) AS triggers_on_the_detached_table FROM pg_trigger WHERE tgrelid = 'va_parts_2'::regclass AND tgname LIKE 'pg_embed%';
SELECT pg_temp.err($$SELECT embed.vectorize('va_parts_1', 'body', 'emb', 'minilm')$$);
SELECT embed.vectorize('va_parts_2', 'body', 'emb', 'minilm') AS enqueued;
SELECT pg_temp.err($$ALTER TABLE va_parts ATTACH PARTITION va_parts_2 FOR VALUES FROM (100) TO (200)$$);
SELECT embed.unvectorize('va_parts_2', 'emb');
SELECT embed.unvectorize('va_parts', 'emb');
DROP TABLE va_parts, va_parts_2;

-- unvectorize: the triggers and the queue go, the vectors stay.
SELECT embed.unvectorize('va_articles', 'emb');
INSERT INTO va_articles VALUES (44, 'not embedded any more');
SELECT count(*) AS vectorizers_left FROM embed.vectorizers;
SELECT id, emb IS NULL AS no_vector FROM va_articles WHERE id IN (1, 44) ORDER BY id;
SELECT embed.unvectorize('va_strict', 'emb');
SELECT embed.unvectorize('va_owned', 'emb');
DROP TABLE va_articles, va_strict, va_nokey, va_owned;
DROP ROLE regress_vec_owner;
DROP ROLE regress_vec_other;
SELECT embed.drop_model('minilm_strict');
