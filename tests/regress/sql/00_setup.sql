-- SQL-level regression suite, run by scripts/test.sh (make test) with pg_regress
-- against a fresh test server with the release build of pg_embed installed.
CREATE EXTENSION IF NOT EXISTS vector;
SELECT extversion FROM pg_extension WHERE extname = 'vector';
