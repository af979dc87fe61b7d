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
