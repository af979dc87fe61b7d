-- pg_embed 0.4.0 -> 0.5.0. Run by ALTER EXTENSION pg_embed UPDATE; tests/ops/upgrade.sh checks
-- that a database upgraded with it has exactly the objects of a fresh 0.5.0 install.
\echo Use "ALTER EXTENSION pg_embed UPDATE TO '0.5.0'" to load this file. \quit
