-- embed.stat_models, embed.stat_reset, pg_embed.track_stats and pg_embed.log_min_duration on
-- a server without pg_embed in shared_preload_libraries: the scope is 'backend' (this
-- session's own calls). tests/ops/stats.sh checks the server scope (preloaded: every
-- backend and worker, restarts, the postgres_exporter file).
-- Token counts are known without pg_embed: BERT's uncased WordPiece vocabulary (MiniLM's)
-- has "hello", "world", "the", "cat", "sat", "a" and "word" as single tokens, plus [CLS]
-- and [SEP]; all-MiniLM-L6-v2 cuts at 256 tokens.
SET client_min_messages = warning;
SELECT embed.register_model('stat_m', 'all-MiniLM-L6-v2') IS NOT NULL AS registered;
RESET client_min_messages;

-- Registering loaded the model in this session: a load, no call yet.
SELECT datname = current_database() AS here, model, source, scope, calls, loads, load_ms > 0 AS load_timed
FROM embed.stat_models WHERE model = 'stat_m';

SELECT array_length(embed('stat_m', 'hello world'), 1);
SELECT count(e) FROM embed('stat_m', ARRAY['the cat sat', NULL, 'a']) AS e;
SELECT array_length(embed('stat_m', repeat('word ', 300)), 1);
-- An ERROR inside a call is counted (an image for a text model).
SELECT embed_image('stat_m', '\x00'::bytea);
-- So is one a PL/pgSQL block catches (the counts wait for the end of the transaction).
DO $$ BEGIN PERFORM embed_image('stat_m', '\x00'::bytea); EXCEPTION WHEN OTHERS THEN NULL; END $$;
-- A model that is not registered has no row (no model, no call).
SELECT embed('stat_nope', 'x');

-- 5 calls, 2 of them errors: 4 inputs, 4 + 5 + 3 + 256 tokens, one truncated. Two loads:
-- registering built the weights and wrote the shared file; the first call maps that file.
SELECT calls, inputs, tokens, truncated_inputs, chunked_inputs, errors, cancels, forward_passes,
       loads, client_calls, client_inputs, client_tokens, worker_calls, worker_inputs, worker_tokens,
       worker_ms, abs(mean_ms - total_ms / calls) < 1e-9 AS mean_ok, max_ms <= total_ms AS max_ok,
       client_ms = total_ms AS client_ms_ok, last_call IS NOT NULL AS called, stats_reset
FROM embed.stat_models WHERE model = 'stat_m';
SELECT count(*) AS rows_for_unregistered FROM embed.stat_models WHERE model = 'stat_nope';

-- pg_embed.track_stats off: calls are not counted.
SET pg_embed.track_stats = off;
SELECT array_length(embed('stat_m', 'hello world'), 1);
RESET pg_embed.track_stats;
SELECT calls FROM embed.stat_models WHERE model = 'stat_m';

-- Reset: one model, or every model of this database; an unknown name resets nothing.
SELECT embed.stat_reset('stat_m');
SELECT calls, inputs, tokens, errors, loads, total_ms, max_ms, last_call, stats_reset IS NOT NULL AS reset_stamped
FROM embed.stat_models WHERE model = 'stat_m';
SELECT embed.stat_reset('stat_nope');
SELECT array_length(embed('stat_m', 'hello world'), 1);
SELECT calls, tokens FROM embed.stat_models WHERE model = 'stat_m';
SELECT embed.stat_reset() >= 1 AS reset_all;
SELECT calls FROM embed.stat_models WHERE model = 'stat_m';

-- Only a superuser or embed_admin may reset; everyone may read.
CREATE ROLE stat_plain;
SET ROLE stat_plain;
SELECT embed.stat_reset();
SELECT count(*) >= 1 AS readable FROM embed.stat_models;
RESET ROLE;
DROP ROLE stat_plain;

-- The settings.
DO $$ BEGIN SET pg_embed.log_min_duration = -2; EXCEPTION WHEN invalid_parameter_value THEN RAISE NOTICE 'refused: %', SQLSTATE; END $$;
SET pg_embed.log_min_duration = '1s';
SHOW pg_embed.log_min_duration;
RESET pg_embed.log_min_duration;
SHOW pg_embed.log_min_duration;
SHOW pg_embed.track_stats;

SELECT embed.drop_model('stat_m');
