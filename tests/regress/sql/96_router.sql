-- Asymmetric dense models: a Router of Dense heads per route after pooling, as
-- sentence-transformers 5.x/6.x save Router.for_query_document (2_Router/router_config.json)
-- and 3.x/4.x save models.Asym (2_Asym/config.json). The route is the third argument:
-- embed(m, t, 'query') is encode_query, embed(m, t, 'document') encode_document; embed(m, t)
-- the Router's default_route ("document"), as encode() without a task; an Asym (which 3.x/4.x
-- skip for an input without a route key) takes its document route too, as encode_document
-- does; options.prompt names another default. Golden values: tests/fixtures/compat/golden.json.
\i tests/regress/include/fixtures.sql
SET extra_float_digits = 0;

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/compat/golden.json')::jsonb AS g;
-- The inputs by case name.
CREATE TABLE inputs AS SELECT key AS case_name, value AS input FROM jsonb_each_text((SELECT g FROM golden) -> 'inputs' -> 'cases');

SELECT name, task, dim, info -> 'router' ->> 'default_route' AS default_route,
       info -> 'router' ->> 'saved_as' AS saved_as
FROM (VALUES ('router6', 'compat/router__st6.2.0', '{}'),
             ('router5', 'compat/router__st5.7.0', '{}'),
             ('asym4', 'compat/router__st4.1.0', '{}'),
             ('asym3_doc', 'compat/router__st3.4.1', '{"prompt": "document"}')) AS m(name, source, options),
     LATERAL embed.register_model(m.name, m.source, m.options::jsonb) AS info,
     jsonb_to_record(info) AS x(task text, dim int)
ORDER BY name;

-- embed.models: one dim for both routes.
SELECT name, dim FROM embed.models WHERE name IN ('router6', 'router5', 'asym4', 'asym3_doc') ORDER BY name;

-- model_info: each route and its heads, in the order the config lists them.
SELECT r ->> 'name' AS route, (r ->> 'dim')::int AS dim,
       h ->> 'in_features' AS in_features, h ->> 'out_features' AS out_features, h ->> 'activation' AS activation,
       regexp_replace(h ->> 'from', '^.*/compat/', '') AS head_from
FROM jsonb_array_elements(embed.model_info('router6') -> 'router' -> 'routes') WITH ORDINALITY AS t(r, n),
     jsonb_array_elements(r -> 'heads') AS h
ORDER BY n;

-- One input: the query route differs from the default (document) route, and equals the
-- golden query vector to 4 decimals.
CREATE TABLE sentence AS
SELECT i.input, c
FROM inputs AS i, jsonb_array_elements((SELECT g FROM golden) -> 'rows' -> 'router__st6.2.0' -> 'cases') AS c
WHERE i.case_name = 'sentence' AND c ->> 'name' = 'sentence';
SELECT input,
       embed('router6', input, 'query') <> embed('router6', input) AS query_differs_from_default,
       ARRAY(SELECT round(x::numeric, 4) FROM unnest(embed('router6', input, 'query')) AS x)
           = ARRAY(SELECT round(x::numeric, 4) FROM jsonb_array_elements_text(c -> 'embedding_query') AS x) AS query_equals_golden,
       ARRAY(SELECT round(x::numeric, 4) FROM unnest(embed('router6', input)) AS x)
           = ARRAY(SELECT round(x::numeric, 4) FROM jsonb_array_elements_text(c -> 'embedding_document') AS x) AS default_equals_golden_document
FROM sentence;
SELECT ARRAY(SELECT round(x::numeric, 4) FROM unnest(embed('router6', input, 'query')) AS x) AS query_4_decimals FROM sentence;

-- Every case of every folder, both routes: the largest difference from the version that
-- wrote it under 1e-4.
SELECT m.name, r.route, count(*) AS cases,
       max((SELECT max(abs(a - b::real)) FROM unnest(r.got, ARRAY(SELECT jsonb_array_elements_text(c -> ('embedding_' || r.route)))) AS u(a, b))) < 1e-4 AS within_1e_4
FROM (VALUES ('router6', 'router__st6.2.0'), ('router5', 'router__st5.7.0'),
             ('asym4', 'router__st4.1.0'), ('asym3_doc', 'router__st3.4.1')) AS m(name, key),
     jsonb_array_elements((SELECT g FROM golden) -> 'rows' -> m.key -> 'cases') AS c
     JOIN inputs AS i ON i.case_name = c ->> 'name',
     LATERAL (VALUES ('query', embed(m.name, i.input, 'query')),
                     ('document', embed(m.name, i.input, 'document'))) AS r(route, got)
GROUP BY m.name, r.route ORDER BY m.name, r.route;

-- Without a route: an Asym folder takes its document route.
SELECT embed('asym4', 'Hello world') = embed('asym4', 'Hello world', 'document') AS asym_default_is_document,
       embed('asym4', 'Hello world') <> embed('asym4', 'Hello world', 'query') AS query_differs;
-- A name that is neither a route nor a prompt.
SELECT pg_temp.err($$SELECT embed('router6', 'x', 'passage')$$);
-- With options.prompt naming the document route, embed(m, t) and arrays take it (a row of a
-- batch within 1e-5 of its single call: the kernels may sum a batch in another order; the
-- query route is 0.1 and more away).
SELECT embed('asym3_doc', 'Hello world') = embed('asym3_doc', 'Hello world', 'document') AS default_is_document,
       (SELECT max(abs(a - b)) < 1e-5
          FROM unnest((SELECT v FROM embed('asym3_doc', ARRAY['Hello world', 'x']) WITH ORDINALITY AS t(v, n) WHERE n = 1),
                      embed('asym3_doc', 'Hello world', 'document')) AS u(a, b)) AS array_is_document;

SELECT embed.drop_model(name) FROM unnest(ARRAY['router6', 'router5', 'asym4', 'asym3_doc']) AS name;
DROP TABLE golden, inputs, sentence;
