-- Shared by the suites that use tests/fixtures: serve the fixtures, and an error helper
-- printing SQLSTATE and message with the fixture directory masked.
\getenv fixtures PG_EMBED_FIXTURES
SET pg_embed.model_dir = :'fixtures';

CREATE FUNCTION pg_temp.err(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE query;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || replace(SQLERRM, current_setting('pg_embed.model_dir'), '$FIXTURES');
END $$;
