-- Error helper: SQLSTATE and message, with the current pg_embed.model_dir masked.
CREATE FUNCTION pg_temp.err(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE query;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || replace(SQLERRM, current_setting('pg_embed.model_dir'), '$MODEL_DIR');
END $$;
