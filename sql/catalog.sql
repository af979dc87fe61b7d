-- pg_embed catalog: registered models. Written only through embed.register_model and
-- embed.drop_model, which superusers and members of embed_admin may call; readable by
-- everyone, so any role may run inference on registered models.
CREATE SCHEMA IF NOT EXISTS embed;
GRANT USAGE ON SCHEMA embed TO PUBLIC;

-- The role whose members may register and drop models (roles are cluster-wide: it is made
-- once and kept when the extension is dropped).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'embed_admin') THEN
        CREATE ROLE embed_admin NOLOGIN;
    END IF;
END
$$;

-- Every registration takes a new revision; backends compare it with the revision of
-- their cached pipeline, so a re-registered or dropped model is never served stale.
CREATE SEQUENCE embed.model_revision;

CREATE TABLE embed.models (
    name          text PRIMARY KEY CHECK (name <> ''),
    source        text NOT NULL,
    options       jsonb NOT NULL DEFAULT '{}',
    task          text NOT NULL,
    architecture  text NOT NULL,
    -- What the model takes: text, image, or both (CLIP: embed and embed_image).
    modality      text NOT NULL DEFAULT 'text' CHECK (modality IN ('text', 'image', 'both')),
    dim           integer NOT NULL CHECK (dim > 0),
    -- Tokens per input (text models; NULL for a model of images alone).
    max_length    integer CHECK (max_length > 0),
    -- The image processor's settings (models of images), as embed.model_info shows them.
    preprocessing jsonb,
    revision      bigint NOT NULL,
    -- hf: sources: the commit the revision resolved to, and the sha256 of every file of
    -- that snapshot; loading verifies both.
    resolved_revision text,
    file_sha256   jsonb,
    registered_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    registered_by name NOT NULL DEFAULT CURRENT_USER,
    -- Set by an upgrade that changed what the model computes (why, and how): its calls fail
    -- until embed.register_model registers it again, which clears it.
    needs_registration text
);
COMMENT ON TABLE embed.models IS 'Models registered with embed.register_model; one row per model name.';
REVOKE ALL ON embed.models FROM PUBLIC;
GRANT SELECT ON embed.models TO PUBLIC;
GRANT INSERT, UPDATE, DELETE ON embed.models TO embed_admin;
GRANT USAGE ON SEQUENCE embed.model_revision TO embed_admin;

-- Registrations are user data: pg_dump keeps them.
SELECT pg_catalog.pg_extension_config_dump('embed.models', '');
SELECT pg_catalog.pg_extension_config_dump('embed.model_revision', '');

-- Calls that write (embed.vectorize, embed.backfill, ...) run on the primary only: on a hot
-- standby they stop at once, saying where to run them (as register_model does in Rust).
CREATE FUNCTION embed._require_primary(function text)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF pg_is_in_recovery() THEN
        RAISE EXCEPTION '% cannot run on a hot standby: it writes to the database', function
            USING ERRCODE = 'read_only_sql_transaction',
                  HINT = 'Run it on the primary: what it writes reaches this standby by replication. '
                         'embed(), classify() and the other read-only calls work here.';
    END IF;
END
$$;
