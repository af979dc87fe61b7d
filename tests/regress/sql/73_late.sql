-- Late interaction from SQL: ColBERT folders saved by PyLate and a bge-m3 folder with
-- FlagEmbedding's heads, embed.maxsim, the write paths into a multi-vector column, and the
-- README's search recipe (candidates from pgvector, an exact MaxSim rerank).
-- Golden values: tests/fixtures/late/golden.json (PyLate 1.6, FlagEmbedding 1.4, numpy).
-- requires: vector
CREATE EXTENSION IF NOT EXISTS vector;
\i tests/regress/include/fixtures.sql
SET extra_float_digits = 0;

CREATE TABLE late_golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/late/golden.json')::jsonb AS g;

SELECT name, task, architecture, dim
FROM (VALUES ('colbert', 'late/colbert', '{}'),
             ('colbert_attend', 'late/colbert_attend', '{}'),
             ('colbert_modern', 'late/colbert_modern', '{}'),
             ('colbert_plain', 'late/colbert_plain', '{}'),
             ('m3', 'late/bge_m3', '{}'),
             ('m3_multi', 'late/bge_m3', '{"task": "multi"}'),
             ('m3_sparse', 'late/bge_m3', '{"task": "sparse"}')) AS m(name, source, options),
     LATERAL embed.register_model(m.name, m.source, m.options::jsonb) AS info,
     jsonb_to_record(info) AS x(task text, architecture text, dim int)
ORDER BY name;

-- A JSON array of arrays as a 2-D real[] ('{}' for []).
CREATE FUNCTION pg_temp.matrix(j jsonb) RETURNS real[] LANGUAGE sql AS $$
    SELECT translate(j::text, '[]', '{}')::real[]
$$;
-- The largest difference of two arrays of the same shape (infinity when the shapes differ).
CREATE FUNCTION pg_temp.diff(a real[], b real[]) RETURNS real LANGUAGE sql AS $$
    SELECT CASE WHEN array_dims(a) IS DISTINCT FROM array_dims(b) THEN 'Infinity'::real
                ELSE coalesce((SELECT max(abs(x - y)) FROM unnest(a, b) AS u(x, y)), 0) END
$$;

-- Every query and document of the four ColBERT models (one call per input; ModernBERT's
-- sliding-window layers among them): the shape
-- (a row per kept token: queries expanded to their length, documents without the
-- skiplist's tokens) and the values within 2e-5 of PyLate's.
SELECT m.name, s.side, count(*) AS inputs,
       bool_and(array_dims(v) = array_dims(pg_temp.matrix(w))) AS shapes_equal,
       max(pg_temp.diff(v, pg_temp.matrix(w))) < 2e-5 AS within_2e_5
FROM (VALUES ('colbert'), ('colbert_attend'), ('colbert_modern'), ('colbert_plain')) AS m(name),
     (VALUES ('query', 'queries'), ('document', 'documents')) AS s(side, texts),
     LATERAL jsonb_array_elements_text((SELECT g FROM late_golden) -> s.texts) WITH ORDINALITY AS t(text, i),
     LATERAL (SELECT (SELECT g FROM late_golden) -> 'models' -> m.name -> (s.side || '_vectors') -> (t.i::int - 1) AS w) AS r,
     LATERAL embed_multi(m.name, t.text, s.side) AS v
GROUP BY m.name, s.side ORDER BY m.name, s.side;

-- The document side is the default; the array form gives each input's rows, in order.
SELECT bool_and(embed_multi('colbert', t.text) = embed_multi('colbert', t.text, 'document')) AS document_default,
       bool_and(pg_temp.diff(b.v, embed_multi('colbert', t.text)) <= 1e-5) AS batched_equal,
       count(*) AS inputs
FROM jsonb_array_elements_text((SELECT g FROM late_golden) -> 'documents') WITH ORDINALITY AS t(text, i)
JOIN embed_multi('colbert', ARRAY(SELECT jsonb_array_elements_text((SELECT g FROM late_golden) -> 'documents')))
     WITH ORDINALITY AS b(v, i) USING (i);
SELECT count(*) AS rows, count(v) AS non_null FROM embed_multi('colbert', ARRAY['one', NULL, 'two']) AS v;

-- bge-m3, one pass: the dense vector (embed), the lexical weights (embed_sparse) and the
-- token vectors (embed_multi) against BGEM3FlagModel.encode, and encode_all equal to them.
CREATE FUNCTION pg_temp.lexical(w jsonb, dim int) RETURNS sparsevec LANGUAGE sql AS $$
    SELECT ('{' || coalesce(string_agg((k::int + 1) || ':' || v, ',' ORDER BY k::int), '') || '}/' || dim)::sparsevec
      FROM jsonb_each_text(w) AS e(k, v)
$$;
SELECT s.texts, count(*) AS inputs,
       max(pg_temp.diff(embed('m3', t.text), pg_temp.matrix(r -> 'dense_vecs' -> (t.i::int - 1)))) < 2e-5 AS dense_within_2e_5,
       max(pg_temp.diff(embed_multi('m3', t.text), pg_temp.matrix(r -> 'colbert_vecs' -> (t.i::int - 1)))) < 2e-5 AS multi_within_2e_5,
       bool_and(regexp_replace(embed_sparse('m3', t.text), ':[^,}]*', '', 'g')
                = regexp_replace(pg_temp.lexical(r -> 'lexical_weights' -> (t.i::int - 1), 402)::text, ':[^,}]*', '', 'g')) AS lexical_ids_equal,
       max((SELECT max(abs(a - b)) FROM unnest(embed_sparse('m3', t.text)::sparsevec::vector::real[],
                                               pg_temp.lexical(r -> 'lexical_weights' -> (t.i::int - 1), 402)::vector::real[]) AS u(a, b))) < 1e-4 AS lexical_within_1e_4,
       bool_and(a.dense = embed('m3', t.text) AND a.sparse = embed_sparse('m3', t.text)
                AND a.multi = embed_multi('m3', t.text)) AS encode_all_equal
FROM (VALUES ('queries'), ('documents')) AS s(texts),
     LATERAL (SELECT (SELECT g FROM late_golden) -> 'models' -> 'bge_m3' -> s.texts AS r) AS x,
     LATERAL jsonb_array_elements_text((SELECT g FROM late_golden) -> s.texts) WITH ORDINALITY AS t(text, i),
     LATERAL embed.encode_all('m3', t.text) AS a
GROUP BY s.texts ORDER BY s.texts;

-- embed.maxsim against numpy (float64), relative error under 1e-5, and against PyLate's
-- colbert_scores of the ColBERT model's own vectors.
SELECT c ->> 'name' AS name, count(*) AS documents,
       max(abs(embed.maxsim(pg_temp.matrix(c -> 'query'), pg_temp.matrix(d)) - (e #>> '{}')::float8)
           / greatest(abs((e #>> '{}')::float8), 1)) < 1e-5 AS within_1e_5
FROM jsonb_array_elements((SELECT g FROM late_golden) -> 'maxsim') AS c,
     LATERAL jsonb_array_elements(c -> 'documents') WITH ORDINALITY AS ds(d, j)
     JOIN LATERAL jsonb_array_elements(c -> 'expected') WITH ORDINALITY AS es(e, k) ON k = j
GROUP BY c ->> 'name' ORDER BY 1;
SELECT count(*) AS pairs,
       max(abs(embed.maxsim(embed_multi('colbert', q.text, 'query'), embed_multi('colbert', d.text))
               - (sc -> (qi.n::int - 1) -> (d.j::int - 1) #>> '{}')::float8)) < 1e-4 AS pylate_scores_within_1e_4
FROM (SELECT (SELECT g FROM late_golden) -> 'models' -> 'colbert' -> 'scores' -> 'values' AS sc) AS s,
     jsonb_array_elements_text((SELECT g FROM late_golden) -> 'models' -> 'colbert' -> 'scores' -> 'queries') WITH ORDINALITY AS qi(q, n),
     LATERAL (SELECT (SELECT g FROM late_golden) -> 'queries' ->> qi.q::int AS text) AS q,
     jsonb_array_elements_text((SELECT g FROM late_golden) -> 'documents') WITH ORDINALITY AS d(text, j);

-- Empty arrays (a query with no kept token) score 0; NULL gives NULL.
SELECT embed.maxsim('{}'::real[], '{{1,2},{3,4}}') AS empty_query, embed.maxsim('{{1,2}}'::real[], '{}') AS empty_document,
       embed.maxsim(NULL::real[], '{{1,2}}') IS NULL AS null_query,
       embed.maxsim('{{1,0},{0,1}}'::real[], '{{2,5},{3,-1}}') AS identity_rows;

-- Errors name what is wrong, with their SQLSTATE.
SELECT pg_temp.err($q$SELECT embed.maxsim('{{1,2,3}}'::real[], '{{1,2}}')$q$);
SELECT pg_temp.err($q$SELECT embed.maxsim('{{1,NULL}}'::real[], '{{1,2}}')$q$);
SELECT pg_temp.err($q$SELECT embed.maxsim('{{1,2}}'::real[], '{{{1,2}}}')$q$);
SELECT pg_temp.err($q$SELECT embed.maxsim(ARRAY['[1,2]'::vector], ARRAY['[1,2,3]'::vector])$q$);
SELECT embed.maxsim(ARRAY['[1,0]', '[0,1]']::vector[], ARRAY['[2,5]', '[3,-1]']::vector[]) AS vector_arrays;
SELECT pg_temp.err($q$SELECT embed('colbert', 'hello')$q$);
SELECT pg_temp.err($q$SELECT embed_multi('colbert', 'hello', 'passage')$q$);
SELECT pg_temp.err($q$SELECT embed_multi('m3', 'hello', 'passage')$q$);
SELECT pg_temp.err($q$SELECT * FROM embed.encode_all('colbert', 'hello')$q$);
SELECT pg_temp.err($q$SELECT embed.register_model('bad', 'late/colbert', '{"task": "embed"}')$q$);
SELECT pg_temp.err($q$SELECT embed.register_model('bad', 'late/bge_m3', '{"task": "classify"}')$q$);

-- The write paths into a multi-vector column: a row trigger (in a session whose
-- extra_float_digits would round the values as text), a statement trigger, backfill and a
-- wrong column type.
CREATE TABLE late_docs (id int PRIMARY KEY, body text, toks real[], toks_s real[], toks_b real[]);
CREATE TRIGGER late_row BEFORE INSERT OR UPDATE ON late_docs
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('colbert', 'body', 'toks');
CREATE TRIGGER late_stmt AFTER INSERT ON late_docs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('colbert', 'body', 'toks_s');
SET extra_float_digits = -15;
INSERT INTO late_docs (id, body)
SELECT i, text FROM jsonb_array_elements_text((SELECT g FROM late_golden) -> 'documents') WITH ORDINALITY AS t(text, i);
INSERT INTO late_docs (id, body) VALUES (100, NULL);
UPDATE late_docs SET body = 'a changed body, with punctuation!' WHERE id = 1;
SET extra_float_digits = 0;
SET client_min_messages = warning;   -- the backfill's progress notices carry rates
CALL embed.backfill('late_docs', 'body', 'toks_b', 'colbert', 3);
RESET client_min_messages;
SELECT count(*) AS rows,
       bool_and(toks IS NULL AND toks_s IS NULL AND toks_b IS NULL) FILTER (WHERE body IS NULL) AS null_for_null,
       max(pg_temp.diff(toks, embed_multi('colbert', body))) FILTER (WHERE body IS NOT NULL) <= 1e-5 AS row_trigger_equal,
       max(pg_temp.diff(toks_b, embed_multi('colbert', body))) FILTER (WHERE body IS NOT NULL) <= 1e-5 AS backfill_equal,
       max(pg_temp.diff(toks_s, embed_multi('colbert', body))) FILTER (WHERE body IS NOT NULL AND id <> 1) <= 1e-5 AS statement_trigger_equal
FROM late_docs;
CREATE TABLE late_wrong (id int PRIMARY KEY, body text, toks vector(16));
CREATE TRIGGER late_wrong BEFORE INSERT ON late_wrong
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('colbert', 'body', 'toks');
SELECT pg_temp.err($q$INSERT INTO late_wrong VALUES (1, 'x')$q$);

-- The search recipe (README): token vectors in a side table under HNSW give candidates,
-- an exact MaxSim over the documents' arrays ranks them. For each golden query, the best
-- document equals the one PyLate's scores rank first.
CREATE TABLE late_tokens (doc int, tok vector(16));
INSERT INTO late_tokens
SELECT d.id, (SELECT array_agg(x ORDER BY n) FROM unnest(d.toks[r:r]) WITH ORDINALITY AS u(x, n))::vector(16)
  FROM late_docs d, generate_subscripts(d.toks, 1) AS r WHERE d.id <= 8 AND d.id <> 1;
CREATE INDEX ON late_tokens USING hnsw (tok vector_ip_ops);
CREATE FUNCTION pg_temp.search(query text, k int) RETURNS TABLE(id int, score real) LANGUAGE sql AS $$
    WITH q AS MATERIALIZED (SELECT embed_multi('colbert', query, 'query') AS m),
    qrows AS (SELECT (SELECT array_agg(x ORDER BY n) FROM unnest(q.m[r:r]) WITH ORDINALITY AS u(x, n))::vector(16) AS v
                FROM q, generate_subscripts(q.m, 1) AS r),
    candidates AS (SELECT DISTINCT c.doc FROM qrows,
                   LATERAL (SELECT doc FROM late_tokens ORDER BY tok <#> qrows.v LIMIT k) AS c)
    SELECT d.id, embed.maxsim(q.m, d.toks_s) AS score
      FROM candidates c JOIN late_docs d ON d.id = c.doc, q
     ORDER BY score DESC, d.id LIMIT 3
$$;
SELECT qi.n AS query, (SELECT s.id FROM pg_temp.search((SELECT g FROM late_golden) -> 'queries' ->> qi.q::int, 20) AS s LIMIT 1)
       = (SELECT j FROM jsonb_array_elements_text(sc -> (qi.n::int - 1)) WITH ORDINALITY AS e(v, j)
           WHERE j <> 1 ORDER BY v::float8 DESC LIMIT 1) AS best_is_pylates
FROM (SELECT (SELECT g FROM late_golden) -> 'models' -> 'colbert' -> 'scores' -> 'values' AS sc) AS s,
     jsonb_array_elements_text((SELECT g FROM late_golden) -> 'models' -> 'colbert' -> 'scores' -> 'queries') WITH ORDINALITY AS qi(q, n)
ORDER BY 1;

DROP TABLE late_docs, late_wrong, late_tokens, late_golden;
SELECT count(*) AS dropped FROM (SELECT embed.drop_model(name) FROM embed.models WHERE name IN ('colbert', 'colbert_attend', 'colbert_modern', 'colbert_plain', 'm3', 'm3_multi', 'm3_sparse')) AS d;
