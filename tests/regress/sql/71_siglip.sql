-- SigLIP and SigLIP 2 from SQL: the tiny towers of tests/fixtures/siglip
-- (scripts/gen_siglip_fixtures.py), compared with transformers' outputs recorded in its
-- golden.json; the zero-shot recipe of the README; image search with pgvector; bad input.
-- requires: vector
CREATE EXTENSION IF NOT EXISTS vector;
\i tests/regress/include/fixtures.sql

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/siglip/golden.json')::jsonb -> 'models' AS g;
CREATE FUNCTION pg_temp.img(f text) RETURNS bytea LANGUAGE sql AS $$
    SELECT pg_read_binary_file(current_setting('pg_embed.model_dir') || '/images/inputs/' || f)
$$;
CREATE FUNCTION pg_temp.arr(j jsonb) RETURNS real[] LANGUAGE sql AS $$
    SELECT ARRAY(SELECT jsonb_array_elements_text(j)::real)
$$;
CREATE FUNCTION pg_temp.cosine(a real[], b real[]) RETURNS float8 LANGUAGE sql AS $$
    SELECT sum(x::float8 * y) / sqrt(sum(x::float8 * x) * sum(y::float8 * y)) FROM unnest(a, b) AS u(x, y)
$$;

SELECT name, r ->> 'architecture' AS architecture, r ->> 'modality' AS modality, r ->> 'task' AS task,
       r -> 'pooling' AS pooling, r -> 'dim' AS dim, r -> 'preprocessing' ->> 'class' AS processor
FROM (VALUES ('siglip', 'siglip/siglip', '{}'), ('siglip_vision', 'siglip/siglip_vision', '{}'),
             ('siglip_text', 'siglip/siglip_text', '{}'), ('siglip_classify', 'siglip/siglip_classify', '{}'),
             ('siglip2', 'siglip/siglip2', '{}'), ('siglip2_classify', 'siglip/siglip2_classify', '{}'),
             ('siglip_spm', 'siglip/siglip_spm', '{}'))
         AS m(name, source, options),
     LATERAL embed.register_model(name, source, options::jsonb) AS r
ORDER BY name;

-- Every image file against transformers: non-JPEG files within 1e-4, JPEGs (decoded a few
-- steps of 255 away from libjpeg-turbo) by cosine.
SELECT model, count(*) AS images,
       bool_and(cosine >= CASE WHEN jpeg THEN 0.9995 ELSE 0.9999 END) AS cosine_ok,
       bool_and(jpeg OR max_diff <= 1e-4) AS exact_within_1e4
FROM (VALUES ('siglip', 'image_embeds', false), ('siglip_vision', 'image_embeds', false),
             ('siglip2', 'image_embeds', false), ('siglip_classify', 'logits', true),
             ('siglip2_classify', 'logits', true)) AS m(model, key, classify),
     golden,
     LATERAL jsonb_each(g -> model -> 'images') AS i(file, image),
     LATERAL (SELECT CASE WHEN classify THEN classify_image(model, pg_temp.img(file))
                          ELSE embed_image(model, pg_temp.img(file)) END AS got,
                     pg_temp.arr(image -> key) AS want, file LIKE '%.jpg' AS jpeg) e,
     LATERAL (SELECT pg_temp.cosine(got, want) AS cosine,
                     (SELECT max(abs(x - y)) FROM unnest(got, want) AS u(x, y)) AS max_diff) c
WHERE image ? key
GROUP BY model ORDER BY model;

-- The text tower: get_text_features of the processor's padded ids (the empty text and a
-- cut one among them); siglip_spm reads SigLIP's own SentencePiece tokenizer.
SELECT model, count(*) AS texts,
       bool_and((SELECT max(abs(x - y)) FROM unnest(embed(model, t ->> 'text'), pg_temp.arr(t -> 'text_embeds')) AS u(x, y)) <= 1e-4) AS within_1e4
FROM (VALUES ('siglip'), ('siglip_text'), ('siglip2'), ('siglip_spm')) AS m(model), golden,
     LATERAL jsonb_array_elements(g -> model -> 'texts') AS t
GROUP BY model ORDER BY model;

-- Zero-shot, SigLIP's way: each label on its own, sigmoid(exp(logit_scale) * cos + logit_bias),
-- the constants from model_info. The README's recipe, against transformers' probabilities.
CREATE FUNCTION pg_temp.zero_shot(model text, image bytea, prompts text[])
RETURNS TABLE(prompt text, probability float8) LANGUAGE sql AS $$
    SELECT p, 1 / (1 + exp(-(exp((i -> 'zero_shot' ->> 'logit_scale')::float8)
                             * (1 - (embed(model, p)::vector <=> embed_image(model, image)::vector))
                             + (i -> 'zero_shot' ->> 'logit_bias')::float8)))
    FROM unnest(prompts) AS p, embed.model_info(model) AS i
$$;
SELECT model, count(*) AS pairs, bool_and(abs(probability - want) <= 1e-5) AS probabilities_within_1e5
FROM (VALUES ('siglip'), ('siglip2')) AS m(model), golden,
     LATERAL jsonb_each(g -> model -> 'zero_shot' -> 'probabilities') AS z(file, probs),
     LATERAL (SELECT ARRAY(SELECT jsonb_array_elements_text(g -> model -> 'zero_shot' -> 'prompts')) AS prompts) p,
     LATERAL pg_temp.zero_shot(model, pg_temp.img(file), p.prompts) WITH ORDINALITY AS r(prompt, probability, k),
     LATERAL (SELECT (probs ->> (k::int - 1))::float8 AS want) w
WHERE file NOT LIKE '%.jpg'
GROUP BY model ORDER BY model;

-- Classification labels, best first, as transformers' logits order them.
SELECT model, (SELECT array_agg(label) FROM classify_image_labels(model, pg_temp.img('rgb_40x30.png'))) AS labels,
       ARRAY(SELECT g -> model -> 'id2label' ->> idx::text
             FROM unnest(pg_temp.arr(g -> model -> 'images' -> 'rgb_40x30.png' -> 'logits')) WITH ORDINALITY AS l(v, i),
                  LATERAL (SELECT i - 1 AS idx) x
             ORDER BY v DESC) AS want
FROM (VALUES ('siglip_classify'), ('siglip2_classify')) AS m(model), golden ORDER BY model;

-- Text-to-image search with pgvector over SigLIP 2 (each image at its own grid), kept
-- filled by a statement trigger; the top 3 as transformers' vectors rank them.
CREATE TABLE photos (file text PRIMARY KEY, image bytea, embedding vector(32));
CREATE TRIGGER photos_embed AFTER INSERT ON photos REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('siglip2', 'image', 'embedding');
INSERT INTO photos (file, image)
SELECT file, pg_temp.img(file) FROM golden, jsonb_each(g -> 'siglip2' -> 'images') AS i(file, image)
WHERE image ? 'image_embeds' AND file NOT LIKE '%.jpg';
SELECT count(*) AS photos, count(embedding) AS embedded FROM photos;
SELECT q.i AS query,
       (SELECT array_agg(file) FROM (SELECT file FROM photos ORDER BY embedding <=> embed('siglip2', q.text)::vector(32) LIMIT 3) p)
     = (SELECT array_agg(file) FROM (SELECT file FROM golden, jsonb_each(g -> 'siglip2' -> 'images') AS i(file, image)
                                      WHERE image ? 'image_embeds' AND file NOT LIKE '%.jpg'
                                      ORDER BY pg_temp.arr(image -> 'image_embeds')::vector(32) <=> q.want LIMIT 3) r) AS top3_as_reference
FROM (SELECT i, t ->> 'text' AS text, pg_temp.arr(t -> 'text_embeds')::vector(32) AS want
        FROM golden, jsonb_array_elements(g -> 'siglip2' -> 'texts') WITH ORDINALITY AS x(t, i)) q
ORDER BY q.i;

-- Bad input: each a clear ERROR with its SQLSTATE.
SELECT pg_temp.err($$SELECT embed('siglip_classify', 'a photo')$$);
SELECT pg_temp.err($$SELECT embed.register_model('bad', 'siglip/siglip', '{"pooling": "mean"}')$$);
SELECT pg_temp.err(format('SELECT embed_image(%L, %L::bytea)', 'siglip2', pg_temp.img('not_an_image.bin')));

DROP TABLE photos, golden;
-- Only this suite's models: a suite skipped before it (PostgreSQL 15, no pgvector) leaves its own.
SELECT count(*) AS dropped FROM (SELECT embed.drop_model(name) FROM embed.models WHERE name LIKE 'siglip%') d;
