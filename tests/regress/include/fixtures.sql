-- Shared by the suites that use tests/fixtures: serve them as pg_embed.model_dir.
\getenv fixtures PG_EMBED_FIXTURES
SET pg_embed.model_dir = :'fixtures';
\i tests/regress/include/err.sql
