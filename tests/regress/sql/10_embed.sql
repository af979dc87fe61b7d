-- embed() as a user calls it: dimensions, unit norm, NULL, pgvector search, errors.
-- requires: vector
CREATE EXTENSION IF NOT EXISTS vector;
SELECT extversion FROM pg_extension WHERE extname = 'vector';

\i tests/regress/include/err.sql

SELECT name, dim, pooling, normalize, max_length, architecture
FROM (SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2') AS info) r,
     jsonb_to_record(r.info) AS x(name text, dim int, pooling jsonb, normalize bool, max_length int, architecture text);

SELECT name, source, task, architecture, dim, max_length, options FROM embed.models;

-- 384 dimensions, unit length.
SELECT array_length(embed('minilm', 'The quick brown fox jumps over the lazy dog'), 1) AS dims;
SELECT round(sqrt(sum(x::float8 * x::float8))::numeric, 5) AS norm
FROM unnest(embed('minilm', 'The quick brown fox jumps over the lazy dog')) AS x;

-- STRICT: NULL in, NULL out. Empty and whitespace-only text embed.
SELECT embed('minilm', NULL) IS NULL AS null_in_null_out;
SELECT array_length(embed('minilm', ''), 1) AS empty, array_length(embed('minilm', E' \t\n'), 1) AS blank;

-- Deterministic: the same text gives the same vector (checked again after a reconnect).
CREATE TABLE first_call AS SELECT embed('minilm', 'déjà vu, 東京, 🎉') AS v;
SELECT v = embed('minilm', 'déjà vu, 東京, 🎉') AS same FROM first_call;

-- pgvector: real[] casts to vector(384); the nearest neighbour is the related sentence.
CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL, emb vector(384));
INSERT INTO docs (id, body) VALUES
    (1, 'Knead the bread dough for ten minutes until it is smooth.'),
    (2, 'The telescope showed the rings of Saturn clearly.'),
    (3, 'The striker scored a late goal to win the match.'),
    (4, 'The compiler reported a type error on line twelve.'),
    (5, 'Water the tomato plants early in the morning.');
UPDATE docs SET emb = embed('minilm', body)::vector(384);
CREATE INDEX ON docs USING hnsw (emb vector_cosine_ops);
SELECT q.query, d.id, d.body
FROM (VALUES ('How do I bake homemade bread?'),
             ('Which planets have rings?'),
             ('Who won the football game?'),
             ('Why does my code not compile?')) AS q(query)
CROSS JOIN LATERAL (
    SELECT id, body FROM docs ORDER BY emb <=> embed('minilm', q.query)::vector(384) LIMIT 1
) AS d;

-- Cosine similarity of a paraphrase beats an unrelated sentence.
SELECT (embed('minilm', 'A man is playing a guitar.')::vector <=> embed('minilm', 'Someone plays an instrument.')::vector)
     < (embed('minilm', 'A man is playing a guitar.')::vector <=> embed('minilm', 'The stock market fell today.')::vector)
    AS paraphrase_is_closer;

-- The array form: a row per input in order, a NULL row for a NULL element, each equal to
-- the single-input call within 1e-5, with batches of one input (budget 8 tokens) and of all.
CREATE TABLE inputs AS
SELECT * FROM unnest(ARRAY['A longer sentence about the database and the vectors it keeps.', NULL, 'short',
                           '', 'middle sized input text', 'déjà vu, 東京, 🎉']) WITH ORDINALITY AS u(x, i);
CREATE FUNCTION pg_temp.array_check() RETURNS TABLE (rows bigint, vectors bigint, nulls_in_place bool, equal_single bool)
LANGUAGE sql AS $$
    SELECT count(*), count(t.e), bool_and(t.e IS NULL = (u.x IS NULL)),
           bool_and(u.x IS NULL OR (SELECT max(abs(p - q)) FROM unnest(t.e, embed('minilm', u.x)) AS z(p, q)) <= 1e-5)
    FROM embed('minilm', (SELECT array_agg(x ORDER BY i) FROM inputs)) WITH ORDINALITY AS t(e, i) JOIN inputs u USING (i)
$$;
SET pg_embed.max_batch_tokens = 8;
SELECT * FROM pg_temp.array_check();
RESET pg_embed.max_batch_tokens;
SELECT * FROM pg_temp.array_check();
SELECT count(*) AS rows FROM embed('minilm', '{}'::text[]);
DROP TABLE inputs;

-- embed.model_files: every file of the folder, each digest equal to PostgreSQL's own sha256
-- of the file.
SELECT count(*) > 0 AS some_files,
       count(*) = count(*) FILTER (WHERE f.sha256 = encode(sha256(pg_read_binary_file(
           current_setting('pg_embed.model_dir') || '/all-MiniLM-L6-v2/' || f.file)), 'hex')) AS all_digests_equal,
       bool_or(f.file = 'config.json') AND bool_or(f.file = 'model.safetensors') AS has_config_and_weights
  FROM embed.model_files('minilm') f;

-- Errors: SQLSTATE and message.
SELECT pg_temp.err($$SELECT embed('nope', 'x')$$);
SELECT pg_temp.err($$SELECT * FROM embed.model_files('nope')$$);
SELECT pg_temp.err($$SELECT embed.drop_model('nope')$$);
SELECT pg_temp.err($$SELECT embed.model_info('nope')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'no-such-dir')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', '../..')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', '/etc')$$);
SET pg_embed.hf_cache = '/nonexistent/hf-cache';
SELECT pg_temp.err($$SELECT embed.register_model('x', 'hf:sentence-transformers/all-MiniLM-L6-v2')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'hf:../../etc/passwd')$$);
RESET pg_embed.hf_cache;
SELECT pg_temp.err($$SELECT embed.register_model('x', '')$$);
SELECT pg_temp.err($$SELECT embed.register_model(NULL, 'all-MiniLM-L6-v2')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{"pooling": "avg"}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{"dimension": 10}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '[1, 2]')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{"max_length": 1}')$$);

-- The full report, hint included.
SELECT embed('nope', 'x');

-- A plain role may embed and read the catalog, but not register, drop or change the
-- model directory.
CREATE ROLE regress_embed_user;
GRANT SELECT ON docs TO regress_embed_user;
SET ROLE regress_embed_user;
SELECT array_length(embed('minilm', 'hello'), 1) AS dims_as_plain_role;
SELECT count(*) AS registered FROM embed.models;
SELECT pg_temp.err($$SELECT embed.register_model('y', 'all-MiniLM-L6-v2')$$);
SELECT pg_temp.err($$SELECT embed.drop_model('minilm')$$);
SELECT pg_temp.err($$DELETE FROM embed.models$$);
SELECT pg_temp.err($$SET pg_embed.model_dir = '/'$$);
SELECT pg_temp.err($$SELECT * FROM embed.cluster_check()$$);
SELECT pg_temp.err($$SELECT * FROM embed.cluster_sync()$$);
RESET ROLE;

-- On a server without Citus the cluster functions find nothing to compare or mend.
SELECT count(*) AS differences FROM embed.cluster_check();
SELECT count(*) AS actions FROM embed.cluster_sync();

-- Dropping a model makes embed() fail with a clear error; re-registering restores it.
SELECT embed.drop_model('minilm');
SELECT pg_temp.err($$SELECT embed('minilm', 'x')$$);
SELECT (embed.register_model('minilm', 'all-MiniLM-L6-v2')) ->> 'dim' AS dim;
SELECT array_length(embed('minilm', 'back again'), 1) AS dims;

-- precision "bfloat16": the same nearest neighbours, vectors within cosine 0.9999 of
-- float32's, half-size linear weights; model_info and loaded_models say so.
SELECT (embed.register_model('minilm_bf16', 'all-MiniLM-L6-v2', '{"precision": "bfloat16"}')) ->> 'precision' AS precision;
SELECT id, 1 - (emb <=> embed('minilm_bf16', body)::vector(384)) >= 0.9999 AS cosine_to_float32_ok,
       embed('minilm_bf16', body) <> embed('minilm', body) AS rounded
FROM docs ORDER BY id;
SELECT q.query, d.id
FROM (VALUES ('How do I bake homemade bread?'), ('Which planets have rings?'),
             ('Who won the football game?'), ('Why does my code not compile?')) AS q(query)
CROSS JOIN LATERAL (
    SELECT id FROM docs ORDER BY emb <=> embed('minilm_bf16', q.query)::vector(384) LIMIT 1
) AS d;
-- precision "int8": the same nearest neighbours, vectors within cosine 0.997 of float32's.
SELECT (embed.register_model('minilm_int8', 'all-MiniLM-L6-v2', '{"precision": "int8"}')) ->> 'precision' AS precision;
SELECT id, 1 - (emb <=> embed('minilm_int8', body)::vector(384)) >= 0.997 AS cosine_to_float32_ok,
       embed('minilm_int8', body) <> embed('minilm', body) AS quantized
FROM docs ORDER BY id;
SELECT q.query, d.id
FROM (VALUES ('How do I bake homemade bread?'), ('Which planets have rings?'),
             ('Who won the football game?'), ('Why does my code not compile?')) AS q(query)
CROSS JOIN LATERAL (
    SELECT id FROM docs ORDER BY emb <=> embed('minilm_int8', q.query)::vector(384) LIMIT 1
) AS d;
SELECT name, precision,
       CASE precision WHEN 'float32' THEN kernel IN ('avx512-float32', 'gemm-float32')
                      WHEN 'int8' THEN kernel ~ '^(avx512-vnni|avx-vnni|avx2-int8|portable-int8)( \(.*\))?$'
                      ELSE kernel ~ '^(amx-bf16|avx512-bf16|portable)( \(.*\))?$' END AS known_kernel
FROM embed.loaded_models() WHERE name LIKE 'minilm%' ORDER BY name;
SELECT pg_temp.err($$SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{"precision": "float16"}')$$);
SELECT embed.drop_model('minilm_bf16');
SELECT embed.drop_model('minilm_int8');

DROP TABLE docs;
DROP ROLE regress_embed_user;

-- A new backend loads the model afresh and gives the identical vector.
\c -
SELECT v = embed('minilm', 'déjà vu, 東京, 🎉') AS same_after_reconnect FROM first_call;
DROP TABLE first_call;
SELECT embed.drop_model('minilm');
