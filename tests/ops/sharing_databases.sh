#!/usr/bin/env bash
# The shared weights of one server are needed server-wide: two databases (A and B) with a
# model each (options no other test uses, so each has a file of its own) share
# pg_embed.cache_dir. What one database's registrations, drop_model and cache_cleanup()
# remove never includes a file the other database's models need; a file of a dropped
# database's model goes with the next cleanup.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

step "shared weights across databases: registrations and cleanups of one keep the other's files"
A=pg_embed_share_a
B=pg_embed_share_b
qa() { PG_EMBED_DB=$A q "$@"; }
qb() { PG_EMBED_DB=$B q "$@"; }
qa1() { PG_EMBED_DB=$A q1 "$@"; }
qb1() { PG_EMBED_DB=$B q1 "$@"; }
q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $A WITH (FORCE)" \
  -c "DROP DATABASE IF EXISTS $B WITH (FORCE)" -c "CREATE DATABASE $A" -c "CREATE DATABASE $B" >/dev/null
for db in $A $B; do
    PG_EMBED_DB=$db q -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_embed" >/dev/null
done
# Each database's model, loaded once (its file written).
qa -c "SELECT embed.register_model('ma', 'all-MiniLM-L6-v2', '{\"max_length\": 77}')" \
   -c "SELECT embed('ma', 'database A') IS NOT NULL" >/dev/null
qb -c "SELECT embed.register_model('mb', 'all-MiniLM-L6-v2', '{\"max_length\": 78}')" \
   -c "SELECT embed('mb', 'database B') IS NOT NULL" >/dev/null
file_a="$(qa1 "SELECT file FROM embed.cache_files() WHERE model = 'ma'")"
file_b="$(qb1 "SELECT file FROM embed.cache_files() WHERE model = 'mb'")"
[ -n "$file_a" ] && [ -n "$file_b" ] && [ "$file_a" != "$file_b" ] \
    || fail "each database's model has a file of its own: A '$file_a', B '$file_b'"
pass "A's model maps $file_a, B's $file_b"
# exists DB FILE: whether DB's cache_files() lists FILE (a file on disk) as needed.
exists() { PG_EMBED_DB=$1 q1 "SELECT coalesce(bool_and(needed), false) FROM embed.cache_files() WHERE file = '$2'"; }

# B registers again (a re-registration removes files no model needs), drops a model and
# cleans up: A's file stays, needed.
qb -c "SELECT embed.register_model('mb', 'all-MiniLM-L6-v2', '{\"max_length\": 78}')" \
   -c "SELECT embed.register_model('mb2', 'all-MiniLM-L6-v2', '{\"max_length\": 79}')" \
   -c "SELECT embed.drop_model('mb2')" -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null
expect_eq "after B's registration, drop_model and cache_cleanup(): A's file, needed (seen from A, from B)" "t t" \
    "$(exists $A "$file_a") $(exists $B "$file_a")"
expect_eq "A's model, in a new session of A, maps the same file" "$file_a" \
    "$(qa1 "SELECT embed('ma', 'again') IS NOT NULL" >/dev/null; qa1 "SELECT file FROM embed.cache_files() WHERE model = 'ma'")"
# The reverse.
qa -c "SELECT embed.register_model('ma', 'all-MiniLM-L6-v2', '{\"max_length\": 77}')" \
   -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null
expect_eq "after A's registration and cache_cleanup(): B's file, needed (seen from B, from A)" "t t" \
    "$(exists $B "$file_b") $(exists $A "$file_b")"
# A dropped: its file is needed by no database, and goes with B's next cleanup.
q -c "DROP DATABASE $A WITH (FORCE)" >/dev/null
removed="$(qb1 "SELECT file FROM embed.cache_cleanup()")"
expect_eq "B's cleanup after DROP DATABASE A removes A's file" "$file_a" "$(grep -Fx "$file_a" <<<"$removed" || true)"
expect_eq "... and keeps B's" "t" "$(exists $B "$file_b")"
qb -c "SELECT embed.drop_model('mb')" >/dev/null
expect_eq "drop_model of B's last model removes its file" "0" \
    "$(qb1 "SELECT count(*) FROM embed.cache_files() WHERE file = '$file_b'")"
q -c "DROP DATABASE $B WITH (FORCE)" >/dev/null
pass "sharing across databases: done"
