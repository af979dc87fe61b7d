-- Every backbone architecture from SQL: the tiny checkpoints of tests/fixtures/backbones
-- (made by scripts/gen_backbone_fixtures.py), embedded with mean pooling (the CLIP text
-- tower with its pooled, projected output; t5_sentence as its sentence-transformers files
-- say) and compared with the outputs of sentence-transformers / transformers recorded in
-- golden.json.
\i tests/regress/include/fixtures.sql

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/backbones/golden.json')::jsonb -> 'fixtures' AS g;

SELECT f AS model, r ->> 'architecture' AS architecture, r -> 'pooling' AS pooling, r -> 'dim' AS dim
FROM golden, jsonb_object_keys(g) AS f,
     LATERAL embed.register_model(f, 'backbones/' || f,
                                  CASE g -> f ->> 'pooled_by' WHEN 'mean' THEN '{"pooling": "mean", "normalize": false}'
                                                              WHEN 'text_embeds' THEN '{"normalize": false}'
                                                              ELSE '{}' END::jsonb) AS r
ORDER BY f;

-- Every input (a derived fixture, another layout of the same weights, has its base's
-- inputs): within 1e-4 of the reference element-wise, cosine >= 0.9999.
SELECT f AS model, count(*) AS inputs,
       bool_and(cardinality(got) = cardinality(want) AND (SELECT max(abs(x - y)) FROM unnest(got, want) AS u(x, y)) <= 1e-4) AS within_1e4,
       bool_and((SELECT sum(x::float8 * y) / sqrt(sum(x::float8 * x) * sum(y::float8 * y)) FROM unnest(got, want) AS u(x, y)) >= 0.9999) AS cosine_09999
FROM golden, jsonb_object_keys(g) AS f,
     LATERAL (SELECT embed(f, c ->> 'text') AS got,
                     ARRAY(SELECT jsonb_array_elements_text(coalesce(g -> f -> 'pooled' -> (i::int - 1), c -> 'pooled'))::real) AS want
              FROM jsonb_array_elements(g -> coalesce(g -> f ->> 'derived_from', f) -> 'cases') WITH ORDINALITY AS t(c, i)) v
GROUP BY f ORDER BY f;

SELECT count(*) AS dropped FROM (SELECT embed.drop_model(name) FROM embed.models) d;
DROP TABLE golden;
