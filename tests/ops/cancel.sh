#!/usr/bin/env bash
# pg_cancel_backend stops a long batch: one embed(model, text[]) call over INPUTS inputs
# (default 10,000) is cancelled from another session once it has run for a second. The
# statement must fail with 57014 (query_canceled) and the same session must embed the same
# vector as before. Prints how long after the cancel the statement ended (the latency is a
# figure, not a check: interrupts are taken between batches of pg_embed.max_batch_tokens).
#   tests/ops/cancel.sh [inputs]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

INPUTS="${1:-10000}"
step "cancel: pg_cancel_backend of embed(model, text[]) over $INPUTS inputs"
out="$(mktemp)"
trap 'rm -f "$out" "$out.sql"' EXIT

start_session "$out" <<SQL
\set ON_ERROR_STOP 0
\set VERBOSITY sqlstate
SELECT 'before ' || md5(embed(:'model', 'the same sentence before and after')::text);
SELECT 'started';
SELECT count(*) FROM embed(:'model', (SELECT array_agg('sentence number ' || i || ' of a batch that is cancelled half-way')
                                       FROM generate_series(1, $INPUTS) AS i));
SELECT 'after ' || md5(embed(:'model', 'the same sentence before and after')::text);
SQL
pid=$SESSION_PID
for _ in $(seq 1 600); do grep -q '^started' "$out" && break; sleep 0.05; done
sleep 1
busy="SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND state = 'active' AND query LIKE '%generate_series%'"
expect_eq "the batch is running after 1 s" 1 "$(q1 "$busy")"
t0=$EPOCHREALTIME
expect_eq "pg_cancel_backend" t "$(q1 "SELECT pg_cancel_backend($pid)")"
while [ "$(q1 "$busy")" = 1 ]; do sleep 0.01; done
t1=$EPOCHREALTIME
wait "$SESSION_JOB"

expect_eq "the batch failed with" 57014 "$(grep -o 'ERROR:  [0-9A-Z]*' "$out" | awk '{ print $2 }')"
[ "$(grep -c '^[0-9]' "$out")" = 0 ] || fail "the batch returned a count: $(cat "$out")"
before="$(sed -n 's/^before //p' "$out")"
expect_eq "the session embeds the same vector after the cancel" "$before" "$(sed -n 's/^after //p' "$out")"
info "the statement ended $(ms_between "$t0" "$t1") ms after pg_cancel_backend (polled every 10 ms)"
