-- pg_embed 0.5.0 -> 0.6.0. Run by ALTER EXTENSION pg_embed UPDATE; tests/ops/upgrade.sh checks
-- that a database upgraded with it has exactly the objects of a fresh 0.6.0 install.
\echo Use "ALTER EXTENSION pg_embed UPDATE TO '0.6.0'" to load this file. \quit

-- 0.6.0: server-wide statistics of the model calls: embed.stat_models, embed.stat_reset.
CREATE  FUNCTION embed."stat_reset"(
	"model" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'stat_reset_wrapper';

CREATE  FUNCTION embed."_stat_models"() RETURNS TABLE (
	"dbid" oid,  /* pg_sys :: Oid */
	"model" TEXT,  /* String */
	"source" TEXT,  /* String */
	"scope" TEXT,  /* String */
	"calls" bigint,  /* i64 */
	"inputs" bigint,  /* i64 */
	"tokens" bigint,  /* i64 */
	"truncated_inputs" bigint,  /* i64 */
	"chunked_inputs" bigint,  /* i64 */
	"errors" bigint,  /* i64 */
	"cancels" bigint,  /* i64 */
	"total_ms" double precision,  /* f64 */
	"max_ms" double precision,  /* f64 */
	"forward_passes" bigint,  /* i64 */
	"loads" bigint,  /* i64 */
	"load_ms" double precision,  /* f64 */
	"shared_bytes" bigint,  /* i64 */
	"last_call" timestamp with time zone,  /* Option < pgrx :: datum :: TimestampWithTimeZone > */
	"worker_calls" bigint,  /* i64 */
	"worker_inputs" bigint,  /* i64 */
	"worker_tokens" bigint,  /* i64 */
	"worker_ms" double precision,  /* f64 */
	"stats_reset" timestamp with time zone  /* Option < pgrx :: datum :: TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'stat_models_wrapper';

-- Server-wide statistics of the model calls (src/stats.rs, src/stats.c): a row per database
-- and model (its name and source). embed._stat_models() shows other databases' rows only
-- to roles with the privileges of pg_read_all_stats or embed_admin; embed.stat_reset
-- resets the current database's rows (superuser or embed_admin).
CREATE VIEW embed.stat_models AS
SELECT d.datname,
       s.dbid,
       s.model,
       s.source,
       s.scope,
       s.calls,
       s.inputs,
       s.tokens,
       s.truncated_inputs,
       s.chunked_inputs,
       s.errors,
       s.cancels,
       s.total_ms,
       CASE WHEN s.calls > 0 THEN s.total_ms / s.calls END AS mean_ms,
       s.max_ms,
       s.forward_passes,
       s.loads,
       s.load_ms,
       s.shared_bytes,
       s.last_call,
       s.calls - s.worker_calls AS client_calls,
       s.inputs - s.worker_inputs AS client_inputs,
       s.tokens - s.worker_tokens AS client_tokens,
       s.total_ms - s.worker_ms AS client_ms,
       s.worker_calls,
       s.worker_inputs,
       s.worker_tokens,
       s.worker_ms,
       s.stats_reset
  FROM embed._stat_models() s
  LEFT JOIN pg_catalog.pg_database d ON d.oid = s.dbid;
GRANT SELECT ON embed.stat_models TO PUBLIC;
REVOKE EXECUTE ON FUNCTION embed.stat_reset(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION embed.stat_reset(text) TO embed_admin;
