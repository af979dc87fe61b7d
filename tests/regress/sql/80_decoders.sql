-- Decoder and XLNet models from SQL: the tiny checkpoints of tests/fixtures/decoders (made by
-- scripts/gen_decoder_fixtures.py): GPT-2 and XLNet backbones and classifiers, Qwen2 / Qwen3
-- embedders (lasttoken pooling, query prompt) and classifiers (a Qwen3 reranker), and
-- EmbeddingGemma (mean pooling, two Dense heads, prompts), against transformers /
-- sentence-transformers' outputs in golden.json, one call per input and as arrays.
-- requires: vector
CREATE EXTENSION IF NOT EXISTS vector;
\i tests/regress/include/fixtures.sql

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/decoders/golden.json')::jsonb -> 'fixtures' AS g;
CREATE TABLE fixture AS SELECT f, g -> f ->> 'kind' AS kind FROM golden, jsonb_object_keys(g) AS f;

-- Every fixture as a model of its own name: architecture, task, pooling, heads, head.
SELECT f AS model, r ->> 'architecture' AS architecture, r ->> 'task' AS task, r -> 'pooling' AS pooling,
       jsonb_array_length(coalesce(r -> 'heads', '[]')) AS heads, r -> 'classifier' ->> 'pooling' AS head_reads,
       r -> 'dim' AS dim
FROM fixture, LATERAL embed.register_model(f, 'decoders/' || f) AS r ORDER BY f;

-- Embedders: every case (with its prompt) within 1e-4 of sentence-transformers, cosine >= 0.9999.
SELECT f AS model, count(*) AS inputs, count(c ->> 'prompt_name') AS prompted,
       bool_and((SELECT max(abs(x - y)) FROM unnest(got, want) AS u(x, y)) <= 1e-4) AS within_1e4,
       bool_and((SELECT sum(x::float8 * y) / sqrt(sum(x::float8 * x) * sum(y::float8 * y)) FROM unnest(got, want) AS u(x, y)) >= 0.9999) AS cosine_09999
FROM fixture, golden, jsonb_array_elements(g -> f -> 'cases') AS c,
     LATERAL (SELECT CASE WHEN c ->> 'prompt_name' IS NULL THEN embed(f, c ->> 'text')
                          ELSE embed(f, c ->> 'text', c ->> 'prompt_name') END AS got,
                     ARRAY(SELECT jsonb_array_elements_text(c -> 'output')::real) AS want) v
WHERE kind = 'embed'
GROUP BY f ORDER BY f;

-- The array form (one packed batch) against the reference's padded batch (left padding
-- for Qwen), for the inputs without a prompt.
SELECT f AS model, count(*) AS inputs,
       bool_and((SELECT max(abs(x - y)) FROM unnest(got, want) AS u(x, y)) <= 1e-4) AS within_1e4
FROM fixture, golden,
     LATERAL (SELECT array_agg(c ->> 'text' ORDER BY i) AS texts, array_agg(i ORDER BY i) AS idx
              FROM jsonb_array_elements(g -> f -> 'cases') WITH ORDINALITY AS t(c, i)
              WHERE c ->> 'prompt_name' IS NULL) b,
     LATERAL embed(f, b.texts) WITH ORDINALITY AS e(got, n),
     LATERAL (SELECT ARRAY(SELECT jsonb_array_elements_text(g -> f -> 'batched' -> (b.idx[n]::int - 1))::real) AS want) w
WHERE kind = 'embed'
GROUP BY f ORDER BY f;

-- Classifiers: logits of every case (single texts and pairs) within 1e-4 of transformers.
SELECT f AS model, count(*) AS cases, count(c ->> 'pair') AS pairs,
       bool_and(cardinality(got) = cardinality(want) AND (SELECT max(abs(x - y)) FROM unnest(got, want) AS u(x, y)) <= 1e-4) AS within_1e4
FROM fixture, golden, jsonb_array_elements(g -> f -> 'cases') AS c,
     LATERAL (SELECT CASE WHEN c ->> 'pair' IS NULL THEN classify(f, c ->> 'text') ELSE classify(f, c ->> 'text', c ->> 'pair') END AS got,
                     ARRAY(SELECT jsonb_array_elements_text(c -> 'output')::real) AS want) v
WHERE kind = 'classify'
GROUP BY f ORDER BY f;

-- GPT-2 reads the last token that is not the pad token: a text ending in it scores as the
-- text without it; without a pad token in the config it does not.
SELECT classify('gpt2_classify', 'hello world<|endoftext|>') = classify('gpt2_classify', 'hello world') AS pad_skipped,
       classify('gpt2_classify_nopad', 'hello world<|endoftext|>') = classify('gpt2_classify_nopad', 'hello world') AS nopad_same;
-- classify_labels: config.json's labels, best first, with the softmax of transformers' logits.
WITH ref AS (SELECT (ARRAY['negative', 'neutral', 'positive'])[i] AS label, x::float8 AS logit
             FROM golden, jsonb_array_elements_text(g -> 'gpt2_classify' -> 'cases' -> 0 -> 'output') WITH ORDINALITY AS t(x, i)),
     prob AS (SELECT label, exp(logit) / sum(exp(logit)) OVER () AS p FROM ref)
SELECT l.label, abs(l.score - prob.p) <= 1e-6 AS softmax_of_reference,
       l.ord = rank() OVER (ORDER BY prob.p DESC) AS best_first
FROM golden, classify_labels('gpt2_classify', g -> 'gpt2_classify' -> 'cases' -> 0 ->> 'text') WITH ORDINALITY AS l(label, score, ord)
JOIN prob USING (label) ORDER BY l.ord;

-- The Qwen3 reranker: the order and scores of sentence-transformers' CrossEncoder.predict.
SELECT array_agg(r.idx ORDER BY r.ord) = (SELECT array_agg(i::int ORDER BY s::real DESC)
                                         FROM jsonb_array_elements_text(g -> 'qwen3_classify' -> 'rerank' -> 'scores') WITH ORDINALITY AS t(s, i)) AS order_matches,
       bool_and(abs(r.score - (g -> 'qwen3_classify' -> 'rerank' -> 'scores' ->> (r.idx - 1))::real) <= 1e-5) AS scores_match
FROM golden,
     LATERAL rerank('qwen3_classify', g -> 'qwen3_classify' -> 'rerank' ->> 'query',
                    ARRAY(SELECT jsonb_array_elements_text(g -> 'qwen3_classify' -> 'rerank' -> 'documents'))) WITH ORDINALITY AS r(idx, score, ord)
GROUP BY g;

-- Decoder embeddings into pgvector: the nearest document to a query with the query prompt
-- is the one the reference's vectors rank first.
CREATE TABLE doc (id int PRIMARY KEY, v vector(64), want vector(64));
INSERT INTO doc SELECT i, embed('qwen3_embed', c ->> 'text')::vector,
                       ARRAY(SELECT jsonb_array_elements_text(c -> 'output')::real)::vector
FROM golden, jsonb_array_elements(g -> 'qwen3_embed' -> 'cases') WITH ORDINALITY AS t(c, i)
WHERE c ->> 'prompt_name' IS NULL;
CREATE TABLE query AS
SELECT embed('qwen3_embed', c ->> 'text', 'query')::vector AS q, ARRAY(SELECT jsonb_array_elements_text(c -> 'output')::real)::vector AS want
FROM golden, jsonb_array_elements(g -> 'qwen3_embed' -> 'cases') AS c
WHERE c ->> 'prompt_name' = 'query' AND c ->> 'text' = 'Hello world';
SELECT (SELECT max(abs(x - y)) FROM unnest(q::real[], want::real[]) AS u(x, y)) <= 1e-4 AS query_within_1e4,
       (SELECT array_agg(id ORDER BY v <=> q, id) FROM doc) = (SELECT array_agg(id ORDER BY d.want <=> query.want, id) FROM doc d) AS ranking_matches
FROM query;

-- Bad input: an empty text for a tokenizer that adds no tokens; a prompt the model lacks; an
-- embedder called as a classifier. (Configs asking for what is not implemented are refused at
-- load with the setting named: crates/pg_embed_core/tests/decoders.rs.)
SELECT pg_temp.err($$SELECT classify('gpt2_classify', '')$$);
SELECT pg_temp.err($$SELECT embed('gpt2', '')$$);
SELECT pg_temp.err($$SELECT embed('qwen3_embed', 'x', 'passage')$$);
SELECT pg_temp.err($$SELECT classify('qwen3_embed', 'x')$$);

DROP TABLE doc, query;
SELECT count(*) AS dropped FROM (SELECT embed.drop_model(name) FROM embed.models) d;
DROP TABLE golden, fixture;
