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
