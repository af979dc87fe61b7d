-- Sequence classification from SQL: classify, classify_labels, rerank, task checks, on
-- the tiny *ForSequenceClassification checkpoints of tests/fixtures/classify (one or more
-- per architecture; transformers' logits and CrossEncoder scores in golden.json).
\i tests/regress/include/fixtures.sql

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/classify/golden.json')::jsonb -> 'fixtures' AS g;

SELECT info ->> 'task' AS task, info -> 'labels' AS labels, info ->> 'problem_type' AS problem_type, info -> 'dim' AS dim
FROM (SELECT embed.register_model('sentiment', 'classify/bert_single_label') AS info) r;
SELECT embed.register_model('topics', 'classify/bert_multi_label') -> 'problem_type' AS problem_type;
SELECT embed.register_model('ce', 'classify/bert_cross_encoder') -> 'labels' AS labels;

-- Every fixture as a model of its own name: the head, problem type and labels resolved.
CREATE TABLE fixture AS SELECT f FROM golden, jsonb_object_keys(g) AS f;
SELECT f AS model, r -> 'classifier' ->> 'architecture' AS architecture, r -> 'classifier' ->> 'pooling' AS pooling,
       r ->> 'problem_type' AS problem_type, r -> 'labels' AS labels,
       r -> 'labels' = (SELECT jsonb_agg(value ORDER BY key::int) FROM jsonb_each(g -> f -> 'config' -> 'id2label')) AS labels_match
FROM fixture, golden, LATERAL embed.register_model(f, 'classify/' || f) AS r ORDER BY f;

-- Logits of every golden case (single inputs and pairs) within 1e-4 of transformers.
SELECT f AS fixture, count(*) AS cases,
       bool_and(cardinality(got) = cardinality(want) AND (SELECT max(abs(x - y)) FROM unnest(got, want) AS u(x, y)) <= 1e-4) AS within_1e4
FROM fixture, golden,
     LATERAL (
         SELECT CASE WHEN c ? 'pair' THEN classify(f, c ->> 'text', c ->> 'pair') ELSE classify(f, c ->> 'text') END AS got,
                ARRAY(SELECT jsonb_array_elements_text(c -> 'logits')::real) AS want
         FROM jsonb_array_elements(g -> f -> 'cases') AS c
     ) v
GROUP BY f ORDER BY f;

-- Labels best first: softmax sums to one; multi-label sigmoids each in (0, 1).
SELECT count(*) AS labels, round(sum(score)::numeric, 4) AS total FROM classify_labels('sentiment', 'What a lovely morning!');
SELECT count(*) AS labels, bool_and(score > 0 AND score < 1) AS sigmoids FROM classify_labels('topics', 'The team won the match.');
SELECT count(*) AS rows FROM classify_labels('sentiment', 'How are you today?', 'I am fine, thank you very much.');

-- rerank: the order and scores of sentence-transformers' CrossEncoder.predict, for every
-- one-label fixture (rows come best first: the order is checked against the golden scores).
SELECT f AS model, array_agg(r.idx ORDER BY r.ord) AS ranking,
       array_agg(r.idx ORDER BY r.ord) = (SELECT array_agg(i::int ORDER BY s::real DESC)
                                         FROM jsonb_array_elements_text(g -> f -> 'rerank' -> 'scores') WITH ORDINALITY AS t(s, i)) AS order_matches,
       bool_and(abs(r.score - (g -> f -> 'rerank' -> 'scores' ->> (r.idx - 1))::real) <= 1e-5) AS scores_match
FROM fixture, golden,
     LATERAL rerank(f, g -> f -> 'rerank' ->> 'query',
                    ARRAY(SELECT jsonb_array_elements_text(g -> f -> 'rerank' -> 'documents'))) WITH ORDINALITY AS r(idx, score, ord)
WHERE g -> f ? 'rerank'
GROUP BY f, g ORDER BY f;
SELECT count(*) AS no_documents FROM rerank('ce', 'q', '{}'::text[]);

-- Task checks and bad input.
SELECT pg_temp.err($$SELECT embed('sentiment', 'x')$$);
SELECT embed.register_model('plain', 'hf_plain') ->> 'task' AS task;
SELECT pg_temp.err($$SELECT classify('plain', 'x')$$);
SELECT pg_temp.err($$SELECT * FROM rerank('sentiment', 'q', ARRAY['a'])$$);
SELECT pg_temp.err($$SELECT * FROM rerank('ce', 'q', ARRAY['a', NULL])$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'classify/bert_single_label', '{"pooling": "cls"}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'pool_mean', '{"task": "classify"}')$$);
-- A classifier embedded through its backbone on request.
SELECT embed.register_model('sentiment_backbone', 'classify/bert_single_label', '{"task": "embed"}') ->> 'task' AS task;
SELECT array_length(embed('sentiment_backbone', 'hello'), 1) AS dims;
-- The full report, hint included.
SELECT embed('sentiment', 'x');

SELECT count(*) AS dropped FROM (SELECT embed.drop_model(name) FROM embed.models) d;
DROP TABLE golden, fixture;
