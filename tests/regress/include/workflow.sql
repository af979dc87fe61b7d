-- Helpers of 50_workflow.sql (included again after it reconnects).
\i tests/regress/include/err.sql
-- Backfill NOTICEs carry timings; they are not part of the expected output.
SET client_min_messages = warning;

-- Forward passes of model "minilm" in this backend so far.
CREATE FUNCTION pg_temp.passes() RETURNS bigint LANGUAGE sql AS $$
    SELECT coalesce((SELECT forward_passes FROM embed.loaded_models() WHERE name = 'minilm'), 0)
$$;
-- Whether a stored vector is what embed() gives for the text now (within 1e-5 per value:
-- a batch and a single call may round differently in the last bits).
CREATE FUNCTION pg_temp.matches(v real[], body text) RETURNS boolean LANGUAGE sql AS $$
    SELECT CASE WHEN body IS NULL THEN v IS NULL
                ELSE (SELECT max(abs(a - b)) <= 1e-5 FROM unnest(v, embed('minilm', body)) AS t(a, b)) END
$$;

