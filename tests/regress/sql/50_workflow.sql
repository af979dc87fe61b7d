-- The in-database workflow as a user runs it: triggers that keep a vector column filled,
-- a resumable backfill with progress, model management and privileges.
-- requires: vector
CREATE EXTENSION IF NOT EXISTS vector;
\i tests/regress/include/workflow.sql
SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2') ->> 'dim' AS dim;

-- ---- row trigger ---------------------------------------------------------------------------
CREATE TABLE notes (id int PRIMARY KEY, body text, emb vector(384));
CREATE TRIGGER notes_embed BEFORE INSERT OR UPDATE ON notes
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'emb');
SELECT pg_temp.passes() AS p0 \gset
INSERT INTO notes VALUES (1, 'Buy milk and eggs.'), (2, 'Call the plumber about the leak.'), (3, NULL);
SELECT pg_temp.passes() - :p0 AS row_trigger_passes_for_3_rows;
SELECT id, emb IS NULL AS no_vector, pg_temp.matches(emb::real[], body) AS matches FROM notes ORDER BY id;
-- Unchanged sources are not embedded again; a changed one is; a NULL source clears it.
SELECT pg_temp.passes() AS p1 \gset
UPDATE notes SET id = id;
SELECT pg_temp.passes() - :p1 AS passes_for_unchanged_rows;
UPDATE notes SET body = 'Buy oat milk.' WHERE id = 1;
UPDATE notes SET body = NULL WHERE id = 2;
UPDATE notes SET body = 'Water the plants.' WHERE id = 3;
SELECT pg_temp.passes() - :p1 AS passes_for_two_changed_rows;
SELECT id, emb IS NULL AS no_vector, pg_temp.matches(emb::real[], body) AS matches FROM notes ORDER BY id;

-- real[] and halfvec(n) targets.
CREATE TABLE notes_real (id int PRIMARY KEY, body text, emb real[], half halfvec(384));
CREATE TRIGGER e1 BEFORE INSERT OR UPDATE ON notes_real
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'emb');
CREATE TRIGGER e2 BEFORE INSERT OR UPDATE ON notes_real
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'half');
INSERT INTO notes_real VALUES (1, 'half precision works too', NULL, NULL);
SELECT pg_temp.matches(emb, body) AS real_matches,
       half = embed('minilm', body)::halfvec(384) AS halfvec_matches FROM notes_real;

-- Errors: a dimension mismatch names both dimensions; wrong column types and names,
-- arguments and trigger kinds are refused.
CREATE TABLE small (id int PRIMARY KEY, body text, emb vector(8), n int);
CREATE TRIGGER small_embed BEFORE INSERT ON small
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'emb');
SELECT pg_temp.err($$INSERT INTO small VALUES (1, 'x')$$);
DROP TRIGGER small_embed ON small;
CREATE TRIGGER small_embed BEFORE INSERT ON small
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'n');
SELECT pg_temp.err($$INSERT INTO small VALUES (1, 'x')$$);
DROP TRIGGER small_embed ON small;
CREATE TRIGGER small_embed BEFORE INSERT ON small
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('minilm', 'text', 'emb');
SELECT pg_temp.err($$INSERT INTO small VALUES (1, 'x')$$);
DROP TRIGGER small_embed ON small;
CREATE TRIGGER small_embed BEFORE INSERT ON small
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('nope', 'body', 'emb');
SELECT pg_temp.err($$INSERT INTO small VALUES (1, 'x')$$);
DROP TRIGGER small_embed ON small;
CREATE TRIGGER small_embed BEFORE INSERT ON small
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('minilm', 'body');
SELECT pg_temp.err($$INSERT INTO small VALUES (1, 'x')$$);
DROP TRIGGER small_embed ON small;
CREATE TRIGGER small_embed AFTER INSERT ON small
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'emb');
SELECT pg_temp.err($$INSERT INTO small VALUES (1, 'x')$$);
DROP TRIGGER small_embed ON small;
CREATE TRIGGER small_embed AFTER INSERT ON small
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'emb');
SELECT pg_temp.err($$INSERT INTO small VALUES (1, 'x')$$);
SELECT count(*) AS rows_kept_after_errors FROM small;

-- ---- statement trigger ---------------------------------------------------------------------
CREATE TABLE articles (id int PRIMARY KEY, body text, emb vector(384));
CREATE TRIGGER articles_embed_insert AFTER INSERT ON articles
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'emb');
CREATE TRIGGER articles_embed_update AFTER UPDATE ON articles
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'emb');
SELECT pg_temp.passes() AS p2 \gset
INSERT INTO articles
SELECT i, CASE WHEN i % 10 = 0 THEN NULL ELSE format('Article %s is about %s.', i,
          (ARRAY['databases', 'cooking', 'astronomy', 'football'])[1 + i % 4]) END
FROM generate_series(1, 50) AS i;
SELECT pg_temp.passes() - :p2 AS statement_trigger_passes_for_50_rows;
SELECT count(*) AS rows, count(emb) AS with_vector,
       bool_and(pg_temp.matches(emb::real[], body)) AS all_match FROM articles;
SELECT pg_temp.passes() AS p3 \gset
UPDATE articles SET id = id;
SELECT pg_temp.passes() - :p3 AS passes_for_unchanged_rows;
UPDATE articles SET body = body || ' Updated.' WHERE id <= 5;
UPDATE articles SET body = NULL WHERE id = 6;
SELECT pg_temp.passes() - :p3 AS passes_for_two_updates;
SELECT count(*) AS rows, count(emb) AS with_vector,
       bool_and(pg_temp.matches(emb::real[], body)) AS all_match FROM articles;
-- pgvector search over the trigger-maintained column.
CREATE INDEX ON articles USING hnsw (emb vector_cosine_ops);
SELECT body LIKE '%astronomy%' AS nearest_is_about_astronomy
  FROM articles ORDER BY emb <=> embed('minilm', 'stars and planets')::vector(384) LIMIT 1;
-- Without a primary key the statement trigger is refused.
CREATE TABLE nokey (body text, emb vector(384));
CREATE TRIGGER nokey_embed AFTER INSERT ON nokey REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('minilm', 'body', 'emb');
SELECT pg_temp.err($$INSERT INTO nokey VALUES ('x')$$);

-- ---- backfill ------------------------------------------------------------------------------
-- 1,200 rows (every 100th without text); a row trigger counts the writes of each row, to
-- show each row is filled exactly once however often the backfill is interrupted.
CREATE TABLE library (id int PRIMARY KEY, body text, emb vector(384));
INSERT INTO library
SELECT i, CASE WHEN i % 100 = 0 THEN NULL ELSE format('Book %s: a story about %s and %s.', i,
          (ARRAY['dragons', 'databases', 'gardens', 'rivers', 'trains'])[1 + i % 5],
          (ARRAY['friendship', 'winter', 'music'])[1 + i % 3]) END
FROM generate_series(1, 1200) AS i;
CREATE TABLE library_writes (id int PRIMARY KEY, writes int NOT NULL);
CREATE FUNCTION pg_temp.count_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO library_writes VALUES (NEW.id, 1)
    ON CONFLICT (id) DO UPDATE SET writes = library_writes.writes + 1;
    RETURN NULL;
END $$;
CREATE TRIGGER library_count AFTER UPDATE ON library FOR EACH ROW EXECUTE FUNCTION pg_temp.count_write();

-- A batch that fails (an input the "strict" model refuses) stops the run; the batches
-- before it stay committed.
SELECT embed.register_model('strict', 'all-MiniLM-L6-v2', '{"long_input": "error"}') IS NOT NULL AS registered;
CREATE TABLE strict_docs (id int PRIMARY KEY, body text, emb vector(384));
INSERT INTO strict_docs SELECT i, 'short text ' || i FROM generate_series(1, 100) AS i;
UPDATE strict_docs SET body = repeat('long ', 400) WHERE id = 50;
-- (CALL directly: a procedure that commits cannot run inside pg_temp.err's function.)
\set VERBOSITY terse
CALL embed.backfill('strict_docs', 'body', 'emb', 'strict', 10);
\set VERBOSITY default
SELECT count(emb) AS filled_before_the_failing_batch FROM strict_docs;
UPDATE strict_docs SET body = 'short again' WHERE id = 50;
CALL embed.backfill('strict_docs', 'body', 'emb', 'strict', 10);
SELECT count(emb) AS filled FROM strict_docs;

-- Interrupted by statement_timeout, then run again: it continues and finishes.
SET statement_timeout = '400ms';
\set VERBOSITY terse
CALL embed.backfill('library', 'body', 'emb', 'minilm', 16);
\set VERBOSITY default
RESET statement_timeout;
SELECT count(emb) < 1188 AS interrupted_before_the_end FROM library;
CALL embed.backfill('library', 'body', 'emb', 'minilm', 16);
SELECT count(*) AS rows, count(emb) AS with_vector, count(*) FILTER (WHERE body IS NULL) AS without_text,
       bool_and(pg_temp.matches(emb::real[], body)) AS all_match FROM library;
SELECT count(*) AS rows_written, max(writes) AS most_writes_of_a_row FROM library_writes;
SELECT pg_temp.err($$CALL embed.backfill('library', 'body', 'emb', 'minilm', 0)$$);
SELECT pg_temp.err($$CALL embed.backfill('library', 'nope', 'emb', 'minilm')$$);
SELECT pg_temp.err($$CALL embed.backfill('library', 'body', 'emb', NULL)$$);

-- ---- management and privileges -------------------------------------------------------------
SELECT name, task, dim, calls > 0 AS used, forward_passes > 0 AS ran, parameters
  FROM embed.loaded_models() ORDER BY name;
SELECT embed.unload('strict') AS unloaded, embed.unload('strict') AS again;
SELECT name FROM embed.loaded_models() ORDER BY name;

CREATE ROLE embed_regress_user;
GRANT SELECT, INSERT, UPDATE ON notes TO embed_regress_user;
SET ROLE embed_regress_user;
SELECT pg_temp.err($$SELECT embed.register_model('mine', 'all-MiniLM-L6-v2')$$);
SELECT pg_temp.err($$SELECT embed.drop_model('minilm')$$);
SELECT pg_temp.err($$SET pg_embed.model_dir = '/'$$);
SELECT pg_temp.err($$SET pg_embed.hf_cache = '/'$$);
SELECT array_length(embed('minilm', 'a plain role may embed'), 1) AS dims;
INSERT INTO notes VALUES (10, 'written by a plain role through the trigger');
SELECT pg_temp.matches(emb::real[], body) AS matches FROM notes WHERE id = 10;
RESET ROLE;
CREATE ROLE embed_regress_admin IN ROLE embed_admin;
SET ROLE embed_regress_admin;
SELECT embed.register_model('admin_model', 'all-MiniLM-L6-v2') ->> 'dim' AS admin_registered;
SELECT registered_by FROM embed.models WHERE name = 'admin_model';
SELECT embed.drop_model('admin_model');
RESET ROLE;
DROP ROLE embed_regress_admin;
REVOKE ALL ON notes FROM embed_regress_user;
DROP ROLE embed_regress_user;
SELECT embed.drop_model('strict');

-- pg_embed.preload: a new session loads the listed models at login (the login event
-- trigger embed_preload); a model that cannot be loaded is a WARNING, not a refused login.
SELECT format('ALTER DATABASE %I SET pg_embed.preload = %L', current_database(), 'minilm') \gexec
\c -
SELECT name, calls FROM embed.loaded_models();
SELECT format('ALTER DATABASE %I SET pg_embed.preload = %L', current_database(), 'nope') \gexec
\c -
SELECT count(*) AS loaded FROM embed.loaded_models();
SELECT format('ALTER DATABASE %I RESET pg_embed.preload', current_database()) \gexec

-- Progress, as another session sees it: the interrupted run, then the finished one.
\c -
\i tests/regress/include/workflow.sql
-- (How far the first got depends on the machine's speed; together they did every row.)
SELECT state, rows_done = rows_total AS complete, state <> 'done' OR rows_per_second > 0 AS rate_if_done
  FROM embed.backfill_progress WHERE relation = 'library'::regclass ORDER BY id;
SELECT sum(rows_done) AS rows_done_by_both_runs, max(rows_total) AS rows_to_do_at_first
  FROM embed.backfill_progress WHERE relation = 'library'::regclass;
-- Nothing left to do: a third run does nothing.
CALL embed.backfill('library', 'body', 'emb', 'minilm');
SELECT rows_total, rows_done, state FROM embed.backfill_progress WHERE relation = 'library'::regclass ORDER BY id DESC LIMIT 1;
