-- The generic pipeline from SQL: pooling modes, projection heads, prompts, dimensions, on
-- the tiny fixtures of tests/fixtures, checked against sentence-transformers' outputs in
-- tests/fixtures/golden.json (made by scripts/gen_fixtures.py).
\i tests/regress/include/fixtures.sql

CREATE TABLE golden AS
SELECT pg_read_file(current_setting('pg_embed.model_dir') || '/golden.json')::jsonb -> 'fixtures' AS g;

-- embed() against a golden field, over every case of a fixture: every element within
-- 2e-5 * max(1, |golden|) (see FIXTURE_ABS_TOL in src/parity.rs), and cosine >= 0.9999.
CREATE FUNCTION pg_temp.parity(model text, fixture text, field text, prompt text DEFAULT NULL)
RETURNS TABLE (cases bigint, within_2e5 bool, min_cosine_ge_09999 bool)
LANGUAGE sql AS $$
    WITH c AS (
        SELECT c.value ->> 'text' AS text,
               ARRAY(SELECT jsonb_array_elements_text(c.value -> field)::real) AS want
        FROM golden, jsonb_array_elements(g -> fixture -> 'cases') AS c
    ), v AS (
        SELECT want, CASE WHEN prompt IS NULL THEN embed(model, text) ELSE embed(model, text, prompt) END AS got
        FROM c
    ), d AS (
        SELECT (SELECT bool_and(abs(x - y) <= 2e-5 * greatest(1, abs(y))) FROM unnest(got, want) AS u(x, y)) AS close,
               (SELECT sum(x::float8 * y) / nullif(sqrt(sum(x::float8 * x) * sum(y::float8 * y)), 0) FROM unnest(got, want) AS u(x, y)) AS cos,
               array_length(got, 1) = array_length(want, 1) AS same_len
        FROM v
    )
    -- An all-zero vector has no cosine; it must then match element-wise.
    SELECT count(*), bool_and(same_len AND close), bool_and(coalesce(cos >= 0.9999, close)) FROM d
$$;

-- Each pooling mode, and three modes concatenated in the order listed.
SELECT m AS mode, (embed.register_model('pool_' || m, 'pool_' || m)) ->> 'dim' AS dim
FROM unnest(ARRAY['cls', 'mean', 'max', 'mean_sqrt_len_tokens', 'weightedmean', 'lasttoken', 'concat', 'concat3']) AS m;
SELECT m AS mode, p.* FROM unnest(ARRAY['cls', 'mean', 'max', 'mean_sqrt_len_tokens', 'weightedmean', 'lasttoken', 'concat', 'concat3']) AS m,
    LATERAL pg_temp.parity('pool_' || m, 'pool_' || m, 'embedding') AS p;
SELECT embed.model_info('pool_concat3') -> 'pooling' AS listed_order;

-- The same three modes from options, on another fixture with the same backbone.
SELECT embed.register_model('concat3_opt', 'pool_cls', '{"pooling": ["mean", "cls", "max"]}') -> 'pooling_from' AS pooling_from;
SELECT * FROM pg_temp.parity('concat3_opt', 'pool_concat3', 'embedding');

-- A plain Hugging Face directory: mean pooling by default, the pooler on request.
SELECT info -> 'pooling' AS pooling, info ->> 'pooling_from' AS pooling_from, info -> 'max_length' AS max_length
FROM (SELECT embed.register_model('plain', 'hf_plain') AS info) r;
SELECT * FROM pg_temp.parity('plain', 'hf_plain', 'embedding');
SELECT embed.register_model('plain_pooler', 'hf_plain', '{"pooling": "pooler"}') -> 'pooling' AS pooling;
SELECT * FROM pg_temp.parity('plain_pooler', 'hf_plain', 'pooler_output');

-- Dense modules from the files: two with different activations, one without bias.
SELECT jsonb_path_query_array(embed.register_model('chain', 'dense_chain'), '$.heads[*].activation') AS activations,
       jsonb_path_query_array(embed.model_info('chain'), '$.heads[*].bias') AS bias;
SELECT * FROM pg_temp.parity('chain', 'dense_chain', 'embedding');

-- User-supplied heads from a safetensors file, then Normalize.
SELECT jsonb_path_query_array(info, '$.heads[*] ? (@.type == "linear").out_features') AS out_features,
       info -> 'dim' AS dim
FROM (SELECT embed.register_model('user_head', 'user_head', '{"heads": [
          {"path": "heads.safetensors", "weight": "proj.weight", "activation": "tanh"},
          {"path": "heads.safetensors", "weight": "out.weight", "bias": null}],
      "normalize": true}') AS info) r;
SELECT * FROM pg_temp.parity('user_head', 'user_head', 'embedding');

-- Prompts: include_prompt false leaves the prompt out of pooling.
SELECT info -> 'prompts' AS prompts, info -> 'include_prompt' AS include_prompt
FROM (SELECT embed.register_model('prompts_exclude', 'prompts_exclude') AS info) r;
SELECT * FROM pg_temp.parity('prompts_exclude', 'prompts_exclude', 'embedding_prompt_query', 'query');
SELECT * FROM pg_temp.parity('prompts_exclude', 'prompts_exclude', 'embedding_prompt_passage', 'passage');
SELECT * FROM pg_temp.parity('prompts_exclude', 'prompts_exclude', 'embedding', '');
SELECT embed.register_model('prompts_concat', 'prompts_exclude_concat') -> 'dim' AS dim;
SELECT * FROM pg_temp.parity('prompts_concat', 'prompts_exclude_concat', 'embedding_prompt_query', 'query');
-- A default prompt from options.
SELECT embed.register_model('prompts_default', 'prompts', '{"prompt": "query"}') -> 'default_prompt' AS default_prompt;
SELECT * FROM pg_temp.parity('prompts_default', 'prompts', 'embedding_prompt_query');

-- Dimensions (Matryoshka): a slice, renormalized only when normalize is given.
SELECT embed.register_model('dims8', 'dense_tanh', '{"dimensions": 8}') -> 'dim' AS dim;
SELECT * FROM pg_temp.parity('dims8', 'dense_tanh', 'embedding_truncate_dim_8');
SELECT embed.register_model('dims8n', 'dense_tanh', '{"dimensions": 8, "normalize": true}') -> 'normalize_after_truncation' AS renormalized;
SELECT * FROM pg_temp.parity('dims8n', 'dense_tanh', 'embedding_truncate_dim_8_normalized');
SELECT dim FROM embed.models WHERE name = 'dims8n';

-- Bad options: SQLSTATE and message, each naming the offending value.
SELECT pg_temp.err($$SELECT embed.register_model('x', 'pool_cls', '{"pooling": "median"}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'pool_cls', '{"pooling": ["cls", "cls"]}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'pool_cls', '{"dimensions": 33}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'pool_cls', '{"dimensions": 0}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'pool_cls', '{"prompt": "passage"}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'user_head', '{"heads": [{"path": "heads.safetensors", "weight": "proj.weight", "activation": "mish"}]}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'user_head', '{"heads": [{"path": "heads.safetensors", "weight": "out.weight"}]}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'user_head', '{"heads": [{"path": "heads.safetensors", "weight": "proj.weight", "bias": "out.weight"}]}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'user_head', '{"heads": [{"path": "heads.safetensors"}]}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'user_head', '{"heads": [{"path": "missing.safetensors"}]}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'user_head', '{"heads": [{"path": "../../../Cargo.toml"}]}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'user_head', '{"heads": [{"path": "/etc/hostname"}]}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'user_head', '{"heads": [{"path": "config.json"}]}')$$);
SELECT pg_temp.err($$SELECT embed.register_model('x', 'user_head', '{"heads": [{"path": "heads.safetensors", "activaton": "tanh"}]}')$$);
SELECT pg_temp.err($$SELECT embed('prompts_exclude', 'x', 'qeury')$$);
-- The full report of an unknown prompt, hint included.
SELECT embed('prompts_exclude', 'x', 'qeury');

SELECT count(*) AS dropped FROM (SELECT embed.drop_model(name) FROM embed.models) d;
DROP TABLE golden;
