-- SQL-level regression suite, run by scripts/test.sh (make test) with pg_regress
-- against a fresh test server with the release build of pg_embed installed.
-- The suites that need pgvector say "-- requires: vector"; scripts/test.sh skips them, and
-- says so, on a server without it (PostgreSQL 15 from Debian's apt).
CREATE EXTENSION pg_embed;
SELECT extversion FROM pg_extension WHERE extname = 'pg_embed';
