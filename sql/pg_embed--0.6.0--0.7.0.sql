-- pg_embed 0.6.0 -> 0.7.0. Run by ALTER EXTENSION pg_embed UPDATE; tests/ops/upgrade.sh checks
-- that a database upgraded with it has exactly the objects of a fresh 0.7.0 install.
\echo Use "ALTER EXTENSION pg_embed UPDATE TO '0.7.0'" to load this file. \quit

-- 0.7.0: a registration whose model this version computes differently is marked, and its
-- calls fail until embed.register_model registers it again (which clears the mark).
-- (Not a change of a vectorized table: the DDL event trigger, which would rebuild every
-- vectorizer's function inside this script, is off for it.)
ALTER EVENT TRIGGER pg_embed_vectorize_ddl DISABLE;
ALTER TABLE embed.models ADD COLUMN needs_registration text;
ALTER EVENT TRIGGER pg_embed_vectorize_ddl ENABLE;

CREATE  FUNCTION embed."_mark_changed_registrations"() RETURNS INT /* i32 */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'mark_changed_registrations_wrapper';
REVOKE EXECUTE ON FUNCTION embed._mark_changed_registrations() FROM PUBLIC;

-- Name and mark the registrations of the layouts 0.6 read as something else
-- (crates/pg_embed_core/src/changes.rs): a WARNING for each (PostgreSQL keeps an extension
-- script's NOTICEs from the client).
SELECT embed._mark_changed_registrations();
