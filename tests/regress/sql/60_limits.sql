-- Limits and cancellation as a user meets them: a long batch stops at statement_timeout and
-- the session goes on; pg_embed.max_model_size refuses a model before loading it.
\i tests/regress/include/err.sql
SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2') ->> 'dim' AS dim;

-- 10,000 inputs in one call, stopped by statement_timeout between two batches.
SET statement_timeout = '500ms';
\set VERBOSITY terse
SELECT count(*) FROM embed('minilm', (SELECT array_agg('sentence number ' || i || ' about cancellation')
                                        FROM generate_series(1, 10000) AS i));
\set VERBOSITY default
RESET statement_timeout;
-- The backend is usable afterwards, with the same model and results.
SELECT array_length(embed('minilm', 'still working after the cancel'), 1) AS dims;
SELECT calls > 0 AS used FROM embed.loaded_models() WHERE name = 'minilm';

-- A model larger than pg_embed.max_model_size is refused before any weight is read.
SET pg_embed.max_model_size = '64MB';
SELECT pg_temp.err($$SELECT embed.register_model('too_big', 'all-MiniLM-L6-v2')$$);
RESET pg_embed.max_model_size;
SELECT count(*) AS registered FROM embed.models WHERE name = 'too_big';

-- embed.chunk's arguments are checked.
SELECT pg_temp.err($$SELECT * FROM embed.chunk('minilm', 'some text', 4, -1)$$);
SELECT pg_temp.err($$SELECT * FROM embed.chunk('nope', 'some text', 4)$$);

-- A plain role: every superuser-only setting is refused, naming it; the per-session
-- settings are its own to tune; unload touches only this session's cache.
CREATE ROLE embed_plain_limits;
SET ROLE embed_plain_limits;
SELECT setting, pg_temp.err(format('SET %s = %L', setting, value)) AS result
  FROM (VALUES ('pg_embed.model_dir', '/'), ('pg_embed.hf_cache', '/'), ('pg_embed.allow_download', 'on'),
               ('pg_embed.auto_register', 'on'), ('pg_embed.preload', 'minilm'),
               ('pg_embed.max_model_size', '0')) AS s(setting, value);
SELECT pg_temp.err('SET pg_embed.threads = 1') AS threads,
       pg_temp.err('SET pg_embed.max_batch_tokens = 1024') AS max_batch_tokens;
SELECT embed.unload() >= 0 AS unloaded_own_cache;
RESET ROLE;
DROP ROLE embed_plain_limits;

-- A plain role's SET of a superuser-only setting before pg_embed is loaded in its session
-- only makes a placeholder: loading pg_embed drops it with a WARNING, and the server's
-- setting is the one used.
SELECT current_user AS superuser \gset
CREATE ROLE embed_plain_login LOGIN;
\c - embed_plain_login
SET pg_embed.model_dir = '/';
SELECT array_length(embed('minilm', 'loads pg_embed in this session'), 1) AS dims;
SELECT current_setting('pg_embed.model_dir') <> '/' AS placeholder_dropped;
\c - :superuser
DROP ROLE embed_plain_login;
