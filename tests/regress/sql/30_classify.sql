-- Sequence classification from SQL: classify, classify_labels, rerank, task checks, on
-- the tiny BertForSequenceClassification checkpoints of tests/fixtures/classify
-- (transformers' logits and CrossEncoder scores in tests/fixtures/classify/golden.json).
\i tests/regress/include/fixtures.sql

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/classify/golden.json')::jsonb -> 'fixtures' AS g;

SELECT info ->> 'task' AS task, info -> 'labels' AS labels, info ->> 'problem_type' AS problem_type, info -> 'dim' AS dim
FROM (SELECT embed.register_model('sentiment', 'classify/bert_single_label') AS info) r;
SELECT embed.register_model('topics', 'classify/bert_multi_label') -> 'problem_type' AS problem_type;
SELECT embed.register_model('ce', 'classify/bert_cross_encoder') -> 'labels' AS labels;

-- Logits of every golden case (single inputs and pairs) within 1e-4 of transformers.
SELECT f AS fixture, count(*) AS cases,
       bool_and((SELECT max(abs(x - y)) FROM unnest(got, want) AS u(x, y)) <= 1e-4) AS within_1e4
FROM (VALUES ('sentiment', 'bert_single_label'), ('topics', 'bert_multi_label'), ('ce', 'bert_cross_encoder')) AS m(model, f),
     golden,
     LATERAL (
         SELECT CASE WHEN c ? 'pair' THEN classify(m.model, c ->> 'text', c ->> 'pair') ELSE classify(m.model, c ->> 'text') END AS got,
                ARRAY(SELECT jsonb_array_elements_text(c -> 'logits')::real) AS want
         FROM jsonb_array_elements(g -> f -> 'cases') AS c
     ) v
GROUP BY f ORDER BY f;

-- Labels best first: softmax sums to one; multi-label sigmoids each in (0, 1).
SELECT count(*) AS labels, round(sum(score)::numeric, 4) AS total FROM classify_labels('sentiment', 'What a lovely morning!');
SELECT count(*) AS labels, bool_and(score > 0 AND score < 1) AS sigmoids FROM classify_labels('topics', 'The team won the match.');
SELECT count(*) AS rows FROM classify_labels('sentiment', 'How are you today?', 'I am fine, thank you very much.');

-- rerank: the order and scores of sentence-transformers' CrossEncoder.predict.
SELECT r.idx, abs(r.score - (g -> 'bert_cross_encoder' -> 'rerank' -> 'scores' ->> (r.idx - 1))::real) <= 1e-5 AS score_matches
FROM golden, LATERAL rerank('ce', g -> 'bert_cross_encoder' -> 'rerank' ->> 'query',
                           ARRAY(SELECT jsonb_array_elements_text(g -> 'bert_cross_encoder' -> 'rerank' -> 'documents'))) AS r;
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
DROP TABLE golden;
