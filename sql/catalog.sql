-- pg_embed catalog: registered models. Written only through embed.register_model and
-- embed.drop_model (superuser-only); readable by everyone, so any role may run
-- inference on registered models.
CREATE SCHEMA IF NOT EXISTS embed;
GRANT USAGE ON SCHEMA embed TO PUBLIC;

-- Every registration takes a new revision; backends compare it with the revision of
-- their cached pipeline, so a re-registered or dropped model is never served stale.
CREATE SEQUENCE embed.model_revision;

CREATE TABLE embed.models (
    name          text PRIMARY KEY CHECK (name <> ''),
    source        text NOT NULL,
    options       jsonb NOT NULL DEFAULT '{}',
    task          text NOT NULL,
    architecture  text NOT NULL,
    dim           integer NOT NULL CHECK (dim > 0),
    max_length    integer NOT NULL CHECK (max_length > 0),
    revision      bigint NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    registered_by name NOT NULL DEFAULT CURRENT_USER
);
COMMENT ON TABLE embed.models IS 'Models registered with embed.register_model; one row per model name.';
REVOKE ALL ON embed.models FROM PUBLIC;
GRANT SELECT ON embed.models TO PUBLIC;

-- Registrations are user data: pg_dump keeps them.
SELECT pg_catalog.pg_extension_config_dump('embed.models', '');
SELECT pg_catalog.pg_extension_config_dump('embed.model_revision', '');
