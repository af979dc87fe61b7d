-- Sparse encoders into pgvector's sparsevec, static embedding models, and hybrid search
-- (a dense and a sparse column, HNSW on both, reciprocal rank fusion in SQL).
-- Golden values: tests/fixtures/sparse/golden.json (sentence-transformers, model2vec).
-- requires: vector
CREATE EXTENSION IF NOT EXISTS vector;
\i tests/regress/include/fixtures.sql
SET extra_float_digits = 0;

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/sparse/golden.json')::jsonb -> 'models' AS g;

SELECT name, task, architecture, dim, max_length
FROM (VALUES ('splade', 'sparse/splade_bert', '{}'),
             ('splade_untied', 'sparse/splade_bert_sum_untied', '{}'),
             ('splade_distil', 'sparse/splade_distilbert', '{}'),
             ('splade_modern', 'sparse/splade_modernbert', '{}'),
             ('splade_roberta', 'sparse/splade_roberta', '{}'),
             ('splade_xlmr', 'sparse/splade_xlm_roberta_untied', '{}'),
             ('splade_free', 'sparse/inference_free', '{}'),
             ('static', 'sparse/static_st', '{}'),
             ('static_dense', 'sparse/static_st_dense', '{}'),
             ('m2v', 'sparse/model2vec_layout', '{}')) AS m(name, source, options),
     LATERAL embed.register_model(m.name, m.source, m.options::jsonb) AS info,
     jsonb_to_record(info) AS x(task text, architecture text, dim int, max_length int)
ORDER BY name;

-- The non-zero ids of a sparsevec text, 0-based as golden.json has them.
CREATE FUNCTION pg_temp.ids(v text) RETURNS int[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(m[1]::int - 1 ORDER BY m[1]::int), '{}') FROM regexp_matches(v, '(\d+):', 'g') AS m
$$;
-- golden.json's indices and values as a sparsevec.
CREATE FUNCTION pg_temp.golden(c jsonb, suffix text, dim int) RETURNS sparsevec LANGUAGE sql AS $$
    SELECT ('{' || coalesce(string_agg((i::int + 1) || ':' || v, ',' ORDER BY n), '') || '}/' || dim)::sparsevec
      FROM jsonb_array_elements_text(c -> ('indices' || suffix)) WITH ORDINALITY AS a(i, n)
      JOIN jsonb_array_elements_text(c -> ('values' || suffix)) WITH ORDINALITY AS b(v, n2) ON n = n2
$$;

-- Every case of the six SPLADE models (BERT tied and untied, DistilBERT, ModernBERT, RoBERTa,
-- XLM-RoBERTa untied), one call per input: the non-zero ids exactly, the largest weight
-- difference (L-infinity, through the dense form, the vocabulary as dimension) under 1e-4.
SELECT m.name, count(*) AS cases,
       bool_and(pg_temp.ids(s) = ARRAY(SELECT jsonb_array_elements_text(c -> 'indices')::int)) AS ids_equal,
       max((SELECT max(abs(a - b)) FROM unnest(s::sparsevec::vector::real[], pg_temp.golden(c, '', (embed.model_info(m.name) ->> 'dim')::int)::vector::real[]) AS u(a, b))) < 1e-4 AS weights_within_1e_4
FROM (VALUES ('splade', 'splade_bert'), ('splade_untied', 'splade_bert_sum_untied'),
             ('splade_distil', 'splade_distilbert'), ('splade_modern', 'splade_modernbert'),
             ('splade_roberta', 'splade_roberta'), ('splade_xlmr', 'splade_xlm_roberta_untied')) AS m(name, key),
     jsonb_array_elements((SELECT g FROM golden) -> m.key -> 'cases') AS c,
     LATERAL embed_sparse(m.name, c ->> 'text') AS s
GROUP BY m.name ORDER BY m.name;

-- The inference-free model: 'query' takes the query route (a weight per token), the
-- default and 'document' the MLM route.
SELECT route, count(*) AS cases,
       bool_and(pg_temp.ids(s) = ARRAY(SELECT jsonb_array_elements_text(c -> ('indices_' || route))::int)) AS ids_equal,
       max((SELECT max(abs(a - b)) FROM unnest(s::sparsevec::vector::real[], pg_temp.golden(c, '_' || route, 401)::vector::real[]) AS u(a, b))) < 1e-4 AS weights_within_1e_4
FROM jsonb_array_elements((SELECT g FROM golden) -> 'inference_free' -> 'cases') AS c,
     LATERAL (VALUES ('query', embed_sparse('splade_free', c ->> 'text', 'query')),
                     ('document', embed_sparse('splade_free', c ->> 'text', 'document')),
                     ('document', embed_sparse('splade_free', c ->> 'text'))) AS r(route, s)
GROUP BY route ORDER BY route;

-- The text casts to sparsevec: 1-based ids, the vocabulary as dimension.
SELECT embed_sparse('splade_free', 'Hello world', 'query') AS query_vector;
SELECT embed_sparse('splade_free', 'Hello world', 'query')::sparsevec AS as_sparsevec;

-- The array form: one row per input, in input order, NULL for NULL; equal to single calls
-- (within 1e-5: on CPUs without AVX-512 the float32 product's order of additions depends on
-- how many rows a batch has).
SELECT ord, v IS NULL AS is_null,
       (SELECT max(abs(a - b)) <= 1e-5 FROM unnest(v::sparsevec::vector::real[],
                                               embed_sparse('splade', t)::sparsevec::vector::real[]) AS u(a, b)) AS same_as_single
FROM unnest(ARRAY['Hello world', NULL, 'The quick brown fox jumps over the lazy dog', '']) WITH ORDINALITY AS a(t, ord)
JOIN embed_sparse('splade', ARRAY['Hello world', NULL, 'The quick brown fox jumps over the lazy dog', ''])
     WITH ORDINALITY AS e(v, o) ON o = ord
ORDER BY ord;

-- Why a document matched: its terms, best first, as sentence-transformers' decode gives them.
SELECT d ->> 'case' AS "case",
       ARRAY(SELECT token FROM embed.sparse_terms('splade', (SELECT c ->> 'text' FROM jsonb_array_elements((SELECT g FROM golden) -> 'splade_bert' -> 'cases') c WHERE c ->> 'name' = d ->> 'case')) LIMIT 5) AS top5,
       ARRAY(SELECT token FROM embed.sparse_terms('splade', (SELECT c ->> 'text' FROM jsonb_array_elements((SELECT g FROM golden) -> 'splade_bert' -> 'cases') c WHERE c ->> 'name' = d ->> 'case')) LIMIT 5)
           = ARRAY(SELECT jsonb_array_elements_text(d -> 'tokens')) AS same_as_decode
FROM jsonb_array_elements((SELECT g FROM golden) -> 'splade_bert' -> 'decode') AS d;
SELECT token, round(weight::numeric, 4) AS weight FROM embed.sparse_terms('splade', 'coffee flows') LIMIT 3;

-- max_terms keeps the largest weights, min_weight drops the small ones.
SELECT embed.register_model('splade_top8', 'sparse/splade_bert', '{"max_terms": 8}') -> 'sparse' -> 'max_terms' AS max_terms;
SELECT array_length(pg_temp.ids(embed_sparse('splade_top8', 'The quick brown fox jumps over the lazy dog')), 1) AS nnz,
       pg_temp.ids(embed_sparse('splade_top8', 'The quick brown fox jumps over the lazy dog'))
           <@ pg_temp.ids(embed_sparse('splade', 'The quick brown fox jumps over the lazy dog')) AS subset;
SELECT embed.register_model('splade_heavy', 'sparse/splade_bert', '{"min_weight": 1.0}') IS NOT NULL AS registered;
SELECT bool_and(weight >= 1.0) AS all_at_least_1, count(*) > 0 AS some
FROM embed.sparse_terms('splade_heavy', 'The quick brown fox jumps over the lazy dog');
SELECT pg_temp.err($$SELECT embed.register_model('bad', 'sparse/splade_bert', '{"max_terms": 0}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('bad', 'sparse/splade_bert', '{"max_terms": 20000}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('bad', 'sparse/splade_bert', '{"min_weight": -0.5}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('bad', 'sparse/static_st', '{"max_terms": 10}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('bad', 'sparse/splade_bert', '{"normalize": true}')$$);

-- The wrong function for the model says which one to use.
SELECT pg_temp.err($$SELECT embed('splade', 'hello')$$);
SELECT pg_temp.err($$SELECT embed_sparse('static', 'hello')$$);
SELECT pg_temp.err($$SELECT * FROM embed.sparse_terms('static', 'hello')$$);
SELECT pg_temp.err($$SELECT embed_sparse('splade', 'hello', 'no_such_prompt')$$);

-- Static models through embed(): sentence-transformers' StaticEmbedding (+ Normalize or
-- Dense) and model2vec's folder (its own computation: [UNK] left out, its config's normalize).
SELECT m.name, count(*) AS cases,
       max((SELECT max(abs(a - b)) FROM unnest(embed(m.name, c ->> 'text'),
                                              ARRAY(SELECT jsonb_array_elements_text(c -> 'embedding')::real)) AS u(a, b))) < 1e-6 AS within_1e_6
FROM (VALUES ('static', 'static_st'), ('static_dense', 'static_st_dense'), ('m2v', 'model2vec_layout')) AS m(name, key),
     jsonb_array_elements((SELECT g FROM golden) -> m.key -> 'cases') AS c
GROUP BY m.name ORDER BY m.name;
-- An input without tokens is the zero vector, as in sentence-transformers.
SELECT embed('static', '') AS empty_input;
SELECT count(*) AS rows, count(x) AS vectors FROM embed('static', ARRAY['Hello world', '', NULL]) AS x;

-- Hybrid search: a dense (static model) and a sparse (SPLADE) column on one table, kept by
-- triggers, HNSW on both; one query fuses the two rankings (reciprocal rank fusion, k = 60).
CREATE TABLE docs (id int PRIMARY KEY, body text, dense vector(16), sparse sparsevec(401));
CREATE TRIGGER docs_dense BEFORE INSERT OR UPDATE ON docs
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('static', 'body', 'dense');
CREATE TRIGGER docs_sparse AFTER INSERT ON docs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('splade', 'body', 'sparse');
INSERT INTO docs (id, body) VALUES
    (1, 'Postgres stores vectors in tables'),
    (2, 'The quick brown fox jumps over the lazy dog'),
    (3, 'Coffee flows from the machine every morning'),
    (4, 'Search engines rank each document by its terms'),
    (5, 'Tokenizers split words into subwords'),
    (6, 'The price went up by 5% from last year'),
    (7, 'How are you today?'),
    (8, 'Data data data everywhere');
CREATE INDEX ON docs USING hnsw (dense vector_cosine_ops);
CREATE INDEX ON docs USING hnsw (sparse sparsevec_ip_ops);
SELECT count(*) AS rows, count(dense) AS dense_filled, count(sparse) AS sparse_filled,
       bool_and(sparse::text = embed_sparse('splade', body)::sparsevec::text) AS sparse_as_embed_sparse
FROM docs;

SET enable_seqscan = off;
SET plan_cache_mode = force_generic_plan;
PREPARE by_sparse(text) AS SELECT id FROM docs ORDER BY sparse <#> embed_sparse('splade', $1, 'query')::sparsevec LIMIT 5;
PREPARE by_dense(text) AS SELECT id FROM docs ORDER BY dense <=> embed('static', $1)::vector(16) LIMIT 5;
EXPLAIN (COSTS OFF) EXECUTE by_sparse('search engines');
EXPLAIN (COSTS OFF) EXECUTE by_dense('search engines');
RESET plan_cache_mode;

PREPARE hybrid(text) AS
WITH q AS MATERIALIZED (
    SELECT embed('static', $1)::vector(16) AS dense, embed_sparse('splade', $1, 'query')::sparsevec AS sparse),
dense AS (
    SELECT id, row_number() OVER (ORDER BY d.dense <=> q.dense) AS rank
      FROM (SELECT id, dense FROM docs ORDER BY dense <=> (SELECT dense FROM q) LIMIT 5) d, q),
sparse AS (
    SELECT id, row_number() OVER (ORDER BY s.sparse <#> q.sparse) AS rank
      FROM (SELECT id, sparse FROM docs ORDER BY sparse <#> (SELECT sparse FROM q) LIMIT 5) s, q)
SELECT id, body, dense.rank AS dense_rank, sparse.rank AS sparse_rank,
       round(coalesce(1.0 / (60 + dense.rank), 0) + coalesce(1.0 / (60 + sparse.rank), 0), 5) AS rrf
  FROM dense FULL JOIN sparse USING (id) JOIN docs USING (id)
 ORDER BY rrf DESC, id
 LIMIT 5;
EXECUTE hybrid('search engines rank documents');
RESET enable_seqscan;
-- The index scans gave what exact scans give.
SET enable_indexscan = off;
EXECUTE hybrid('search engines rank documents');
RESET enable_indexscan;

-- A backfill and a dense model into a sparsevec column, and the reverse, refused by name.
CREATE TABLE sparse_notes (id int PRIMARY KEY, body text, terms sparsevec(401), wrong sparsevec(400), dense real[]);
INSERT INTO sparse_notes SELECT g, 'note number ' || g FROM generate_series(1, 10) g;
SET client_min_messages = warning;   -- the progress NOTICEs carry rates
CALL embed.backfill('sparse_notes', 'body', 'terms', 'splade', 4);
RESET client_min_messages;
SELECT count(terms) AS filled, bool_and(terms::text = embed_sparse('splade', body)::sparsevec::text) AS same FROM sparse_notes;
SELECT pg_temp.err($$CALL embed.backfill('sparse_notes', 'body', 'wrong', 'splade', 4)$$);
SELECT pg_temp.err($$CALL embed.backfill('sparse_notes', 'body', 'dense', 'splade', 4)$$);
SELECT pg_temp.err($$CALL embed.backfill('sparse_notes', 'body', 'terms', 'static', 4)$$);

-- The asynchronous queue writes sparse vectors too. Its workers read pg_embed.model_dir
-- from the database's settings: this suite's fixtures, for workers started from now on.
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I SET pg_embed.model_dir = %L', current_database(), current_setting('pg_embed.model_dir'));
END $$;
SELECT count(pg_terminate_backend(pid)) >= 0 AS restarted FROM pg_stat_activity
 WHERE backend_type = 'pg_embed vectorize' AND datname = current_database();
SET client_min_messages = warning;
SELECT embed.vectorize('sparse_notes', 'body', 'terms', 'splade') AS queued;
RESET client_min_messages;
UPDATE sparse_notes SET terms = NULL, body = body || '!' WHERE id <= 3;
SELECT embed.vectorize_wait('sparse_notes', 'terms', '30 seconds') AS drained;
SELECT count(terms) AS filled, bool_and(terms::text = embed_sparse('splade', body)::sparsevec::text) AS same FROM sparse_notes;
SELECT embed.unvectorize('sparse_notes', 'terms');
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I RESET pg_embed.model_dir', current_database());
END $$;

DROP TABLE docs, sparse_notes, golden;
SELECT embed.drop_model(name) FROM embed.models WHERE name IN
    ('splade', 'splade_untied', 'splade_distil', 'splade_modern', 'splade_roberta', 'splade_xlmr', 'splade_free', 'static', 'static_dense', 'm2v', 'splade_top8', 'splade_heavy');
