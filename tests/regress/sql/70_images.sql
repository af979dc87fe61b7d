-- Image models from SQL: the tiny ViT, ViTForImageClassification, CLIP, DINOv2 and the
-- multilingual CLIP text student of tests/fixtures/images (scripts/gen_image_fixtures.py),
-- compared with transformers' / sentence-transformers' outputs recorded in golden.json;
-- text-to-image search with pgvector; triggers and backfill on a bytea column; bad images.
-- requires: vector
CREATE EXTENSION IF NOT EXISTS vector;
\i tests/regress/include/fixtures.sql

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/images/golden.json')::jsonb -> 'models' AS g;
CREATE FUNCTION pg_temp.img(f text) RETURNS bytea LANGUAGE sql AS $$
    SELECT pg_read_binary_file(current_setting('pg_embed.model_dir') || '/images/inputs/' || f)
$$;
-- A batch and a single call may round differently in the last bits: within 1e-5 per value.
CREATE FUNCTION pg_temp.close(a real[], b real[]) RETURNS boolean LANGUAGE sql AS $$
    SELECT cardinality(a) = cardinality(b) AND (SELECT max(abs(x - y)) <= 1e-5 FROM unnest(a, b) AS u(x, y))
$$;
CREATE FUNCTION pg_temp.cosine(a real[], b real[]) RETURNS float8 LANGUAGE sql AS $$
    SELECT sum(x::float8 * y) / sqrt(sum(x::float8 * x) * sum(y::float8 * y)) FROM unnest(a, b) AS u(x, y)
$$;

SELECT name, r ->> 'architecture' AS architecture, r ->> 'modality' AS modality, r ->> 'task' AS task,
       r -> 'pooling' AS pooling, r -> 'dim' AS dim, r -> 'preprocessing' ->> 'class' AS processor
FROM (VALUES ('vit', 'images/vit', '{}'), ('vit_pooler', 'images/vit', '{"pooling": "pooler"}'),
             ('vit_classify', 'images/vit_classify', '{}'), ('clip', 'images/clip', '{}'),
             ('clip_st', 'images/clip_st', '{}'), ('dinov2', 'images/dinov2', '{}'),
             ('dinov2_mean', 'images/dinov2_nocrop', '{"pooling": "mean"}'),
             ('student', 'images/clip_multilingual_student', '{}')) AS m(name, source, options),
     LATERAL embed.register_model(name, source, options::jsonb) AS r
ORDER BY name;
SELECT name, modality, task, max_length, preprocessing ->> 'class' AS processor FROM embed.models ORDER BY name;

-- Every image file against the reference: the model's output for the processor's pixels.
-- Every file but a JPEG gives exactly transformers' pixels (cosine >= 0.9999, within 1e-4);
-- JPEGs decode a few steps of 255 away from libjpeg-turbo's, cosine >= 0.9995 (README,
-- "Images: decoding and preprocessing").
SELECT model, count(*) AS images,
       bool_and(cosine >= CASE WHEN jpeg THEN 0.9995 ELSE 0.9999 END) AS cosine_ok,
       bool_and(jpeg OR max_diff <= 1e-4) AS exact_within_1e4
FROM (VALUES ('vit', 'vit', 'cls'), ('vit_pooler', 'vit', 'pooler'), ('clip', 'clip', 'image_embeds'),
             ('clip_st', 'clip_st', 'st_embedding'), ('dinov2', 'dinov2', 'cls'),
             ('dinov2_mean', 'dinov2_nocrop', 'mean')) AS m(model, fixture, key),
     golden,
     LATERAL jsonb_each(g -> fixture -> 'images') AS i(file, image),
     LATERAL (SELECT embed_image(model, pg_temp.img(file)) AS got,
                     ARRAY(SELECT jsonb_array_elements_text(image -> 'outputs' -> key)::real) AS want,
                     file LIKE '%.jpg' AS jpeg) e,
     LATERAL (SELECT pg_temp.cosine(got, want) AS cosine,
                     (SELECT max(abs(x - y)) FROM unnest(got, want) AS u(x, y)) AS max_diff) c
WHERE image -> 'outputs' ? key
GROUP BY model ORDER BY model;

-- The array form: input order, a NULL element gives a NULL row, the same vectors.
SELECT i, v IS NULL AS is_null, cardinality(v) AS dim,
       pg_temp.close(v, embed_image('vit', pg_temp.img(f))) AS same_as_one
FROM (SELECT ARRAY[pg_temp.img('rgb_40x30.png'), NULL, pg_temp.img('photo_48x36.jpg'), pg_temp.img('palette_24x18.gif')] AS a,
             ARRAY['rgb_40x30.png', NULL, 'photo_48x36.jpg', 'palette_24x18.gif'] AS files) x,
     LATERAL embed_image('vit', a) WITH ORDINALITY AS e(v, i),
     LATERAL (SELECT files[i] AS f) ff
ORDER BY i;

-- Classification: logits as transformers gives them, labels best first with softmax scores.
SELECT bool_and(pg_temp.cosine(classify_image('vit_classify', pg_temp.img(file)),
                               ARRAY(SELECT jsonb_array_elements_text(image -> 'outputs' -> 'logits')::real)) >= 0.9995) AS logits_ok,
       count(*) AS images
FROM golden, jsonb_each(g -> 'vit_classify' -> 'images') AS i(file, image)
WHERE image -> 'outputs' ? 'logits';
SELECT label, round(score::numeric, 4) AS score FROM classify_image_labels('vit_classify', pg_temp.img('exact_32x32.png'));
SELECT round(sum(score)::numeric, 4) AS total FROM classify_image_labels('vit_classify', pg_temp.img('rgb_24x24.bmp'));

-- CLIP: embed(model, text) is the text tower's projected output, in the image space.
SELECT count(*) AS texts,
       bool_and(pg_temp.cosine(embed('clip', t ->> 'text'), ARRAY(SELECT jsonb_array_elements_text(t -> 'text_embeds')::real)) >= 0.9999) AS text_ok
FROM golden, jsonb_array_elements(g -> 'clip' -> 'texts') AS t;

-- Text-to-image search with pgvector: images in a table, embedded by a statement trigger;
-- CLIP's text queries and the multilingual student's rank them as the reference vectors
-- do. Queries whose reference top 4 lie at least 1e-3 apart in cosine distance (a JPEG's
-- vector is within cosine 5e-4 of the reference; closer ties could swap).
CREATE TABLE photos (file text PRIMARY KEY, image bytea, embedding vector(16));
CREATE TRIGGER photos_embed AFTER INSERT ON photos REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('clip', 'image', 'embedding');
INSERT INTO photos (file, image)
SELECT file, pg_temp.img(file) FROM golden, jsonb_each(g -> 'clip' -> 'images') AS i(file, image)
WHERE image -> 'outputs' ? 'image_embeds';
SELECT count(*) AS photos, count(embedding) AS embedded FROM photos;
CREATE TEMP TABLE ref AS
SELECT file, ARRAY(SELECT jsonb_array_elements_text(image -> 'outputs' -> 'image_embeds')::real)::vector(16) AS v
FROM golden, jsonb_each(g -> 'clip' -> 'images') AS i(file, image) WHERE image -> 'outputs' ? 'image_embeds';
SELECT q.i AS query,
       (SELECT array_agg(file ORDER BY embedding <=> embed('clip', q.text)::vector(16), file) FROM (SELECT * FROM photos ORDER BY embedding <=> embed('clip', q.text)::vector(16) LIMIT 3) p)
     = (SELECT array_agg(file ORDER BY v <=> want, file) FROM (SELECT * FROM ref ORDER BY v <=> want LIMIT 3) r) AS clip_top3_as_reference
FROM (SELECT i, t ->> 'text' AS text, ARRAY(SELECT jsonb_array_elements_text(t -> 'text_embeds')::real)::vector(16) AS want
        FROM golden, jsonb_array_elements(g -> 'clip' -> 'texts') WITH ORDINALITY AS x(t, i)) q
WHERE q.i IN (2, 3, 4, 5)
ORDER BY q.i;
SELECT q.i AS student_query,
       (SELECT array_agg(file ORDER BY embedding <=> embed('student', q.text)::vector(16), file) FROM (SELECT * FROM photos ORDER BY embedding <=> embed('student', q.text)::vector(16) LIMIT 3) p)
     = (SELECT array_agg(file ORDER BY v <=> want, file) FROM (SELECT * FROM ref ORDER BY v <=> want LIMIT 3) r) AS student_top3_as_reference
FROM (SELECT i, t ->> 'text' AS text, ARRAY(SELECT jsonb_array_elements_text(t -> 'st_embedding')::real)::vector(16) AS want
        FROM golden, jsonb_array_elements(g -> 'clip_multilingual_student' -> 'texts') WITH ORDINALITY AS x(t, i)) q
WHERE q.i IN (1, 2, 5)
ORDER BY q.i;

-- A row trigger and a resumable backfill on a bytea column, both with embed_image.
CREATE TABLE pics (id int PRIMARY KEY, image bytea, embedding real[]);
CREATE TRIGGER pics_embed BEFORE INSERT OR UPDATE ON pics
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('dinov2', 'image', 'embedding');
INSERT INTO pics VALUES (1, pg_temp.img('rgb_40x30.png')), (2, NULL), (3, pg_temp.img('lossless_30x20.webp'));
SELECT id, pg_temp.close(embedding, embed_image('dinov2', image)) AS same, embedding IS NULL AS is_null FROM pics ORDER BY id;
UPDATE pics SET image = pg_temp.img('gray_17x31.png') WHERE id = 2;
SELECT id, pg_temp.close(embedding, embed_image('dinov2', image)) AS same FROM pics WHERE id = 2;
DROP TRIGGER pics_embed ON pics;
UPDATE pics SET embedding = NULL;
-- Backfill NOTICEs carry timings; they are not part of the expected output.
SET client_min_messages = warning;
CALL embed.backfill('pics', 'image', 'embedding', 'dinov2', 2);
RESET client_min_messages;
SELECT count(*) FILTER (WHERE pg_temp.close(embedding, embed_image('dinov2', image))) AS filled FROM pics;

-- A source column the model cannot take: refused when the trigger is created, naming both.
CREATE TABLE captions (id int PRIMARY KEY, body text, embedding real[]);
SELECT pg_temp.err($$CREATE TRIGGER t BEFORE INSERT ON pics FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('student', 'image', 'embedding')$$);
SELECT pg_temp.err($$CREATE TRIGGER t BEFORE INSERT ON captions FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('vit', 'body', 'embedding')$$);
SELECT pg_temp.err($$CALL embed.backfill('captions', 'body', 'embedding', 'vit')$$);
-- CLIP takes both.
CREATE TRIGGER captions_embed BEFORE INSERT ON captions FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('clip', 'body', 'embedding');
INSERT INTO captions VALUES (1, 'a photo of a cat');
SELECT pg_temp.close(embedding, embed('clip', body)) AS same FROM captions;

-- Bad input: each a clear ERROR with its SQLSTATE, and the session goes on.
SELECT pg_temp.err($$SELECT embed('vit', 'a photo')$$);
SELECT pg_temp.err($$SELECT embed_image('nope', '\x00'::bytea)$$);
SELECT embed_image('vit', NULL::bytea) IS NULL AS null_image_gives_null;
SELECT pg_temp.err($$SELECT embed_image('student', '\x89504e47'::bytea)$$);
SELECT pg_temp.err($$SELECT classify('vit_classify', 'a photo')$$);
SELECT pg_temp.err($$SELECT embed_image('vit_classify', pg_temp.img('exact_32x32.png'))$$);
SELECT pg_temp.err(format('SELECT embed_image(%L, %L::bytea)', 'vit', pg_temp.img(f))) AS error, f
FROM unnest(ARRAY['not_an_image.bin', 'truncated.png', 'empty.bin']) AS f;
SELECT pg_temp.err($$SELECT embed_image('vit', 'GIF89a'::bytea)$$);
SET pg_embed.max_image_pixels = 59999;
SELECT pg_temp.err($$SELECT embed_image('vit', pg_temp.img('large_300x200.png'))$$);
RESET pg_embed.max_image_pixels;
SELECT cardinality(embed_image('vit', pg_temp.img('large_300x200.png'))) AS dim;
SELECT pg_temp.err($$SELECT embed.register_model('bad', 'images/vit', '{"max_length": 8}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('bad', 'images/clip', '{"pooling": "mean"}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('bad', 'images/vit_classify', '{"task": "embed", "pooling": "pooler"}')$$);

DROP TABLE photos, pics, captions, golden;
SELECT count(*) AS dropped FROM (SELECT embed.drop_model(name) FROM embed.models) d;
