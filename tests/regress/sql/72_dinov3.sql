-- DINOv3 from SQL: the tiny DINOv3ViTModels of tests/fixtures/dinov3
-- (scripts/gen_dinov3_fixtures.py: registers, 2-D rotary positions, a plain and a gated MLP,
-- DINOv3ViTImageProcessor) over the inputs of tests/fixtures/images, compared with
-- transformers' outputs recorded in golden.json: pooler_output (the default) and the patch
-- mean (pooling mean), one image at a time and as an array.
\i tests/regress/include/fixtures.sql

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/dinov3/golden.json')::jsonb -> 'models' AS g;
CREATE FUNCTION pg_temp.img(f text) RETURNS bytea LANGUAGE sql AS $$
    SELECT pg_read_binary_file(current_setting('pg_embed.model_dir') || '/images/inputs/' || f)
$$;
CREATE FUNCTION pg_temp.cosine(a real[], b real[]) RETURNS float8 LANGUAGE sql AS $$
    SELECT sum(x::float8 * y) / sqrt(sum(x::float8 * x) * sum(y::float8 * y)) FROM unnest(a, b) AS u(x, y)
$$;

SELECT name, r ->> 'architecture' AS architecture, r ->> 'modality' AS modality, r -> 'pooling' AS pooling,
       r -> 'dim' AS dim, r -> 'preprocessing' ->> 'class' AS processor
FROM (VALUES ('dinov3', 'dinov3/dinov3', '{}'), ('dinov3_mean', 'dinov3/dinov3', '{"pooling": "mean"}'),
             ('dinov3_gated', 'dinov3/dinov3_gated', '{}'),
             ('dinov3_gated_mean', 'dinov3/dinov3_gated', '{"pooling": "mean"}')) AS m(name, source, options),
     LATERAL embed.register_model(name, source, options::jsonb) AS r
ORDER BY name;

-- Every image file against the reference. Every file but a JPEG gives transformers' pixels
-- within 1e-6 (cosine >= 0.9999, within 1e-4); JPEGs decode a few steps of 255 away from
-- libjpeg-turbo's, cosine >= 0.9995.
SELECT model, count(*) AS images,
       bool_and(cosine >= CASE WHEN jpeg THEN 0.9995 ELSE 0.9999 END) AS cosine_ok,
       bool_and(jpeg OR max_diff <= 1e-4) AS exact_within_1e4
FROM (VALUES ('dinov3', 'dinov3', 'pooler'), ('dinov3_mean', 'dinov3', 'mean'),
             ('dinov3_gated', 'dinov3_gated', 'pooler'),
             ('dinov3_gated_mean', 'dinov3_gated', 'mean')) AS m(model, fixture, key),
     golden,
     LATERAL jsonb_each(g -> fixture -> 'images') AS i(file, image),
     LATERAL (SELECT embed_image(model, pg_temp.img(file)) AS got,
                     ARRAY(SELECT jsonb_array_elements_text(image -> 'outputs' -> key)::real) AS want,
                     file LIKE '%.jpg' AS jpeg) e,
     LATERAL (SELECT pg_temp.cosine(got, want) AS cosine,
                     (SELECT max(abs(x - y)) FROM unnest(got, want) AS u(x, y)) AS max_diff) c
GROUP BY model ORDER BY model;

-- The array form (images of different grids in one batch): input order, the reference's
-- vectors.
SELECT i, cardinality(v) AS dim,
       (SELECT max(abs(x - y)) <= 1e-4
          FROM unnest(v, ARRAY(SELECT jsonb_array_elements_text(g -> 'dinov3_gated' -> 'images' -> f -> 'outputs' -> 'mean')::real)) AS u(x, y)) AS as_reference
FROM golden,
     (SELECT ARRAY['rgb_40x30.png', 'wide_200x3.png', 'tall_3x150.png', 'one_1x1.png'] AS files) x,
     LATERAL embed_image('dinov3_gated_mean', ARRAY(SELECT pg_temp.img(f) FROM unnest(files) WITH ORDINALITY AS u(f, n) ORDER BY n)) WITH ORDINALITY AS e(v, i),
     LATERAL (SELECT files[i] AS f) ff
ORDER BY i;

-- model_info's backbone is the configuration the reference ran.
SELECT m.name, embed.model_info(m.name) -> 'backbone' -> 'num_register_tokens' = g -> m.fixture -> 'num_register_tokens' AS registers_as_reference,
       embed.model_info(m.name) -> 'backbone' -> 'use_gated_mlp' = g -> m.fixture -> 'use_gated_mlp' AS gated_as_reference
FROM golden, (VALUES ('dinov3', 'dinov3'), ('dinov3_gated', 'dinov3_gated')) AS m(name, fixture)
ORDER BY m.name;

DROP TABLE golden;
-- Only this suite's models: a suite skipped before it (PostgreSQL 15, no pgvector) leaves its own.
SELECT count(*) AS dropped FROM (SELECT embed.drop_model(name) FROM embed.models WHERE name LIKE 'dinov3%') d;
