-- pg_embed 0.3.0 -> 0.4.0. Run by ALTER EXTENSION pg_embed UPDATE; tests/ops/upgrade.sh checks
-- that a database upgraded with it has exactly the objects of a fresh 0.4.0 install.
\echo Use "ALTER EXTENSION pg_embed UPDATE TO '0.4.0'" to load this file. \quit

-- Vectorizers of tables dropped under 0.3.0 (which left them behind), with their queue.
DELETE FROM embed.vectorizers z WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = z.tbl);

-- The key, source and target columns by number (renames are followed).
ALTER TABLE embed.vectorizers ADD COLUMN key_attnum smallint, ADD COLUMN source_attnum smallint,
    ADD COLUMN target_attnum smallint;
UPDATE embed.vectorizers z
   SET key_attnum = (SELECT a.attnum FROM pg_catalog.pg_attribute a WHERE a.attrelid = z.tbl AND a.attname = z.key_column),
       source_attnum = (SELECT a.attnum FROM pg_catalog.pg_attribute a WHERE a.attrelid = z.tbl AND a.attname = z.source_column),
       target_attnum = (SELECT a.attnum FROM pg_catalog.pg_attribute a WHERE a.attrelid = z.tbl AND a.attname = z.target_column);
ALTER TABLE embed.vectorizers ALTER COLUMN key_attnum SET NOT NULL, ALTER COLUMN source_attnum SET NOT NULL,
    ALTER COLUMN target_attnum SET NOT NULL;

-- 0.4.0: Citus (sql/cluster.sql): registrations for the whole cluster, backfill of
-- distributed tables node by node, vectorize refused on Citus tables; preload skipped for
-- Citus's own connections.
CREATE FUNCTION embed."model_files"(
	"name" TEXT /* & str */
) RETURNS TABLE (
	"file" TEXT,  /* String */
	"sha256" TEXT  /* String */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'model_files_wrapper';

-- pg_embed on a Citus cluster. Registrations are made for the whole cluster from the
-- coordinator: embed.register_model and embed.drop_model there carry the change to every
-- active primary worker (embed._cluster_apply), all of them or none; embed.cluster_check()
-- says which node's registrations differ from the coordinator's, embed.cluster_sync() makes
-- them equal (a node added later has none). Without Citus, or on a worker, these do nothing
-- more than the node's own registration. Citus's catalogs are read with dynamic SQL: the
-- extension does not depend on Citus.

-- What Citus makes of `rel`: 'distributed' (hash, range or append), 'reference', 'local' (a
-- Citus local table), or NULL (a plain table, or no Citus in this database).
CREATE FUNCTION embed._citus_kind(rel regclass)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kind text;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE 'SELECT CASE WHEN partmethod <> ''n'' THEN ''distributed''
                         WHEN repmodel = ''t'' THEN ''reference'' ELSE ''local'' END
               FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1'
        INTO kind USING rel;
    RETURN kind;
END
$$;

-- The active primary workers of the cluster when this node is a Citus coordinator (group
-- 0), as host:port; none elsewhere.
CREATE FUNCTION embed._citus_workers(OUT node text, OUT host text, OUT port integer)
RETURNS SETOF record LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF to_regclass('pg_catalog.pg_dist_local_group') IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE
        'SELECT n.nodename || '':'' || n.nodeport, n.nodename::text, n.nodeport
           FROM pg_catalog.pg_dist_node n
          WHERE (SELECT groupid FROM pg_catalog.pg_dist_local_group) = 0
            AND n.groupid <> 0 AND n.noderole = ''primary'' AND n.isactive
          ORDER BY n.nodename, n.nodeport';
END
$$;

-- Runs `command` (one statement) here and returns 'ok', or the error it raised as
-- '<sqlstate> <message>' (what a node sends back to the coordinator, which raises it there).
CREATE FUNCTION embed._on_node(command text)
RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE command;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END
$$;

-- Runs each command on its worker (commands[i] on hosts[i]:ports[i], in parallel, each in its
-- own transaction there) and returns the one value each returned, in the same order; a node
-- that failed or could not be reached answers '08006 <why>'. Commands that may fail are
-- wrapped in embed._on_node, so their SQLSTATE comes back.
CREATE FUNCTION embed._run_on_workers(hosts text[], ports integer[], commands text[])
RETURNS text[] LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    answers text[];
BEGIN
    EXECUTE 'SELECT array_agg(CASE WHEN r.success THEN r.result ELSE ''08006 '' || r.result END ORDER BY i.ord)
               FROM unnest($1, $2) WITH ORDINALITY AS i(host, port, ord)
               JOIN pg_catalog.master_run_on_worker($1, $2, $3, true) r
                 ON r.node_name = i.host AND r.node_port = i.port'
        INTO answers USING hosts, ports, commands;
    RETURN answers;
END
$$;

-- Called by embed.register_model ('register') and embed.drop_model ('drop') after their own
-- catalog write, in the same transaction: on a Citus coordinator, does the same on every
-- active primary worker. If any worker refuses, the workers that had done it are put back as
-- they were and the error is raised here, naming the node (so the coordinator's write is
-- undone too). Refused inside a transaction block: the workers' changes commit on their own,
-- and a later ROLLBACK here could not take them back.
CREATE FUNCTION embed._cluster_apply(action text, name text, source text, options jsonb, in_block boolean)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hosts text[];
    ports integer[];
    nodes text[];
    n integer;
    before text[];
    answers text[];
    failed integer;
BEGIN
    SELECT array_agg(w.host), array_agg(w.port), array_agg(w.node), count(*) INTO hosts, ports, nodes, n
      FROM embed._citus_workers() w;
    IF n = 0 THEN
        RETURN;
    END IF;
    IF in_block THEN
        RAISE EXCEPTION 'embed.%_model cannot run inside a transaction block on a Citus coordinator', action
            USING ERRCODE = 'active_sql_transaction',
                  HINT = 'Run it on its own: it is carried to every worker node, where it commits at once.';
    END IF;
    -- What each worker has now, to put back if another refuses.
    before := embed._run_on_workers(hosts, ports, array_fill(format(
        'SELECT coalesce((SELECT jsonb_build_object(''source'', source, ''options'', options)::text
                            FROM embed.models WHERE name = %L), ''none'')', name), ARRAY[n]));
    failed := (SELECT min(k) FROM generate_subscripts(before, 1) k WHERE before[k] LIKE '08006 %');
    IF failed IS NOT NULL THEN
        RAISE EXCEPTION 'embed.%_model(%): worker node % did not answer: %', action, quote_literal(name),
            nodes[failed], substr(before[failed], 7)
            USING ERRCODE = 'connection_failure', HINT = 'Nothing was changed on any node.';
    END IF;
    answers := embed._run_on_workers(hosts, ports, array_fill(format('SELECT embed._on_node(%L)', CASE action
        WHEN 'register' THEN format('SELECT embed.register_model(%L, %L, %L::jsonb)', name, source, options)
        ELSE format('SELECT embed.drop_model(name) FROM embed.models WHERE name = %L', name) END), ARRAY[n]));
    failed := (SELECT min(k) FROM generate_subscripts(answers, 1) k WHERE answers[k] <> 'ok');
    IF failed IS NULL THEN
        RETURN;
    END IF;
    -- Put back the workers that did it.
    PERFORM embed._run_on_workers(hosts, ports, ARRAY(
        SELECT format('SELECT embed._on_node(%L)', CASE
                   WHEN answers[k] <> 'ok' THEN 'SELECT 1'
                   WHEN before[k] = 'none' THEN format('SELECT embed.drop_model(%L)', name)
                   ELSE format('SELECT embed.register_model(%L, %L, %L::jsonb)', name,
                               before[k]::jsonb ->> 'source', before[k]::jsonb -> 'options') END)
          FROM generate_subscripts(answers, 1) k ORDER BY k));
    RAISE EXCEPTION 'embed.%_model(%): worker node % refused: %', action, quote_literal(name), nodes[failed],
        substr(answers[failed], 7)
        USING ERRCODE = left(answers[failed], 5),
              HINT = 'Nothing was changed on any node. Fix it there (e.g. the model''s files under that node''s pg_embed.model_dir), then run it again.';
END
$$;

-- This node's registrations as jsonb: {name: {source, options, files: {file: sha256}}}; a
-- model whose files cannot be read now has "files_error" instead of "files".
CREATE FUNCTION embed._registrations()
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m record;
    result jsonb := '{}';
    files jsonb;
BEGIN
    FOR m IN SELECT name, source, options FROM embed.models ORDER BY name LOOP
        BEGIN
            SELECT coalesce(jsonb_object_agg(f.file, f.sha256), '{}') INTO files FROM embed.model_files(m.name) f;
            result := result || jsonb_build_object(m.name, jsonb_build_object('source', m.source, 'options', m.options, 'files', files));
        EXCEPTION WHEN OTHERS THEN
            result := result || jsonb_build_object(m.name, jsonb_build_object('source', m.source, 'options', m.options,
                                                                              'files_error', SQLSTATE || ' ' || SQLERRM));
        END;
    END LOOP;
    RETURN result;
END
$$;

-- On a Citus coordinator: every difference between a worker's registrations and the
-- coordinator's (name, source, options, the files' digests), one row each; no rows when all
-- nodes agree. Elsewhere: no rows.
CREATE FUNCTION embed.cluster_check(OUT node text, OUT model text, OUT difference text)
RETURNS SETOF record LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hosts text[];
    ports integer[];
    nodes text[];
    n integer;
    here jsonb := embed._registrations();
    answers text[];
    there jsonb;
    k integer;
    name text;
    a jsonb;
    b jsonb;
BEGIN
    SELECT array_agg(w.host), array_agg(w.port), array_agg(w.node), count(*) INTO hosts, ports, nodes, n
      FROM embed._citus_workers() w;
    IF n = 0 THEN
        RETURN;
    END IF;
    answers := embed._run_on_workers(hosts, ports, array_fill('SELECT embed._registrations()'::text, ARRAY[n]));
    FOR k IN 1 .. n LOOP
        node := nodes[k];
        IF answers[k] LIKE '08006 %' THEN
            model := NULL; difference := 'not read: ' || substr(answers[k], 7);
            RETURN NEXT;
            CONTINUE;
        END IF;
        there := answers[k]::jsonb;
        FOR name IN SELECT jsonb_object_keys(here) UNION SELECT jsonb_object_keys(there) ORDER BY 1 LOOP
            model := name; a := here -> name; b := there -> name;
            difference := CASE
                WHEN b IS NULL THEN 'not registered on the worker'
                WHEN a IS NULL THEN 'registered on the worker only'
                WHEN a -> 'source' <> b -> 'source' THEN format('source: %s here, %s there', a -> 'source', b -> 'source')
                WHEN a -> 'options' <> b -> 'options' THEN format('options: %s here, %s there', a -> 'options', b -> 'options')
                WHEN b ? 'files_error' THEN 'files not readable there: ' || (b ->> 'files_error')
                WHEN a ? 'files_error' THEN 'files not readable here: ' || (a ->> 'files_error')
                WHEN a -> 'files' <> b -> 'files' THEN 'files differ: ' || (
                    SELECT string_agg(f, ', ' ORDER BY f) FROM (
                        SELECT jsonb_object_keys(a -> 'files') f UNION SELECT jsonb_object_keys(b -> 'files')) s
                     WHERE (a -> 'files' -> f) IS DISTINCT FROM (b -> 'files' -> f))
                END;
            IF difference IS NOT NULL THEN
                RETURN NEXT;
            END IF;
        END LOOP;
    END LOOP;
END
$$;

-- On a Citus coordinator: registers on each worker every model whose registration there is
-- missing or differs from the coordinator's (source, options), and drops there the models
-- the coordinator does not have; one row per change. For a node added with citus_add_node,
-- or one that was down during a registration. Elsewhere: no rows.
CREATE FUNCTION embed.cluster_sync(OUT node text, OUT model text, OUT action text)
RETURNS SETOF record LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    d record;
    w record;
    m embed.models;
    answer text;
BEGIN
    FOR d IN SELECT * FROM embed.cluster_check() c WHERE c.model IS NOT NULL ORDER BY 1, 2 LOOP
        SELECT * INTO w FROM embed._citus_workers() x WHERE x.node = d.node;
        SELECT * INTO m FROM embed.models x WHERE x.name = d.model;
        node := d.node; model := d.model;
        IF NOT FOUND THEN
            action := 'dropped';
            answer := (embed._run_on_workers(ARRAY[w.host], ARRAY[w.port],
                ARRAY[format('SELECT embed._on_node(%L)', format('SELECT embed.drop_model(%L)', d.model))]))[1];
        ELSE
            action := 'registered';
            answer := (embed._run_on_workers(ARRAY[w.host], ARRAY[w.port],
                ARRAY[format('SELECT embed._on_node(%L)', format('SELECT embed.register_model(%L, %L, %L::jsonb)',
                                                               m.name, m.source, m.options))]))[1];
        END IF;
        IF answer <> 'ok' THEN
            RAISE EXCEPTION 'embed.cluster_sync: % of model % on worker node % failed: %',
                CASE action WHEN 'dropped' THEN 'the drop' ELSE 'the registration' END, quote_literal(d.model), d.node,
                substr(answer, 7)
                USING ERRCODE = left(answer, 5);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Both connect to the workers as the caller: superusers only.
REVOKE ALL ON FUNCTION embed.cluster_check() FROM PUBLIC;
REVOKE ALL ON FUNCTION embed.cluster_sync() FROM PUBLIC;
-- Called by register_model and drop_model, which check the caller first; it runs as the
-- extension's owner, who may reach the workers.
REVOKE ALL ON FUNCTION embed._cluster_apply(text, text, text, jsonb, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION embed._cluster_apply(text, text, text, jsonb, boolean) TO embed_admin;
REVOKE ALL ON FUNCTION embed._run_on_workers(text[], integer[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION embed._on_node(text) FROM PUBLIC;

-- embed.backfill of a Citus table: a distributed table's rows are filled where they live.
-- The coordinator sends each node that holds shards one CALL of embed._backfill_local with
-- its shards; the nodes run at once, each filling its shards one after another with
-- embed.backfill (batches by ctid inside a shard, where ctids are unique, each committed).
-- Checked first on every node (the model registered there, its dimension against the
-- column's), so a refusal keeps its SQLSTATE and names the node. A reference table is
-- refused: its copies must stay equal, which only Citus's own UPDATE keeps.
CREATE FUNCTION embed._backfill_shards(tbl regclass, source_column text, target_column text, model text,
                                       batch_size integer)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hosts text[];
    ports integer[];
    shards text[];
    nodes text[];
    answers text[];
    total bigint;
    left_over bigint;
    started timestamptz := clock_timestamp();
    k integer;
    count_null text := format('SELECT count(*) FROM %s WHERE %I IS NULL AND %I IS NOT NULL', tbl, target_column, source_column);
BEGIN
    IF embed._citus_kind(tbl) = 'reference' THEN
        RAISE EXCEPTION 'embed.backfill does not fill reference table %', tbl
            USING ERRCODE = 'feature_not_supported',
                  HINT = format('Use UPDATE %s SET %I = embed(...) WHERE %I IS NULL: Citus keeps every copy equal.',
                                tbl, target_column, target_column);
    END IF;
    EXECUTE 'SELECT array_agg(host ORDER BY host, port), array_agg(port ORDER BY host, port),
                    array_agg(names ORDER BY host, port), array_agg(host || '':'' || port ORDER BY host, port)
               FROM (SELECT s.nodename::text AS host, s.nodeport AS port,
                            array_agg(pg_catalog.shard_name(s.table_name, s.shardid, false) ORDER BY s.shardid)::text AS names
                       FROM pg_catalog.citus_shards s WHERE s.table_name = $1
                      GROUP BY 1, 2) n'
        INTO hosts, ports, shards, nodes USING tbl;
    EXECUTE count_null INTO total;
    -- Each node's first shard checked there (the model, the columns, the dimension).
    answers := embed._run_on_workers(hosts, ports, ARRAY(
        SELECT format('SELECT embed._on_node(%L)', format('SELECT embed._check_target(%L::regclass, %L, %L, %L)',
                      (sh::text[])[1], model, source_column, target_column))
          FROM unnest(shards) sh));
    FOR k IN 1 .. coalesce(array_length(hosts, 1), 0) LOOP
        IF answers[k] <> 'ok' THEN
            RAISE EXCEPTION 'embed.backfill(%): node % refused: %', tbl, nodes[k], substr(answers[k], 7)
                USING ERRCODE = left(answers[k], 5);
        END IF;
    END LOOP;
    RAISE NOTICE 'backfill %.%: % rows to fill on % nodes (% shards)', tbl, target_column, total,
        coalesce(array_length(hosts, 1), 0), (SELECT count(*) FROM unnest(shards) sh, unnest(sh::text[]));
    answers := embed._run_on_workers(hosts, ports, ARRAY(
        SELECT format('CALL embed._backfill_local(%L::text[], %L, %L, %L, %s)', sh, source_column, target_column,
                      model, batch_size)
          FROM unnest(shards) sh));
    EXECUTE count_null INTO left_over;
    FOR k IN 1 .. coalesce(array_length(hosts, 1), 0) LOOP
        IF answers[k] LIKE '08006 %' THEN
            RAISE EXCEPTION 'embed.backfill(%): node % stopped: % (% of % rows filled; run it again to go on)',
                tbl, nodes[k], substr(answers[k], 7), total - left_over, total
                USING ERRCODE = 'external_routine_exception';
        END IF;
    END LOOP;
    RAISE NOTICE 'backfill %.%: done, % rows in % s on % nodes', tbl, target_column, total - left_over,
        round(extract(epoch FROM clock_timestamp() - started)::numeric, 1), coalesce(array_length(hosts, 1), 0);
END
$$;

-- A node's part of embed._backfill_shards: embed.backfill of each of its shards in turn.
CREATE PROCEDURE embed._backfill_local(shards text[], source_column text, target_column text, model text,
                                       batch_size integer)
LANGUAGE plpgsql AS $$
DECLARE
    shard text;
BEGIN
    FOREACH shard IN ARRAY shards LOOP
        CALL embed.backfill(shard::regclass, source_column, target_column, model, batch_size);
    END LOOP;
END
$$;

-- ---- embed.vectorize of a distributed table ------------------------------------------------
-- The vectorizer's queue trigger is put on the distributed table itself, so Citus puts it on
-- every shard, on whichever node a shard lives now or later (moves and splits carry it). Every
-- worker holds a copy of the vectorizer row (the same id, its table the worker's copy of the
-- distributed table), so a shard's trigger queues the keys of its rows on the node that holds
-- it, and that node's background workers embed them: they read and write the distributed table
-- by key through Citus from that node (a key whose shard moved meanwhile is still found).

-- Whether this node is a Citus coordinator (group 0).
CREATE FUNCTION embed._citus_coordinator()
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    is_it boolean;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_local_group') IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT groupid = 0 FROM pg_catalog.pg_dist_local_group' INTO is_it;
    RETURN coalesce(is_it, false);
END
$$;

-- On a worker: makes (or updates) this node's copy of the coordinator's vectorizer `v` (its
-- table named by `tbl`, this node's copy of the distributed table).
CREATE FUNCTION embed._vectorize_node(v jsonb, tbl text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    z embed.vectorizers := jsonb_populate_record(NULL::embed.vectorizers, v - 'tbl');
BEGIN
    z.tbl := tbl::regclass;
    IF EXISTS (SELECT FROM embed.vectorizers x WHERE x.id = z.id AND (x.tbl, x.target_column) <> (z.tbl, z.target_column)) THEN
        RAISE EXCEPTION 'vectorizer id % is taken on this node by %.%', z.id,
            (SELECT x.tbl FROM embed.vectorizers x WHERE x.id = z.id), (SELECT x.target_column FROM embed.vectorizers x WHERE x.id = z.id)
            USING ERRCODE = 'duplicate_object';
    END IF;
    INSERT INTO embed.vectorizers AS x (id, tbl, source_column, target_column, model, batch_size, key_column, key_type,
                                        owner, key_attnum, source_attnum, target_attnum)
    VALUES (z.id, z.tbl, z.source_column, z.target_column, z.model, z.batch_size, z.key_column, z.key_type, z.owner,
            z.key_attnum, z.source_attnum, z.target_attnum)
    ON CONFLICT (id) DO UPDATE
       SET source_column = EXCLUDED.source_column, model = EXCLUDED.model, batch_size = EXCLUDED.batch_size,
           key_column = EXCLUDED.key_column, key_type = EXCLUDED.key_type, owner = EXCLUDED.owner,
           key_attnum = EXCLUDED.key_attnum, source_attnum = EXCLUDED.source_attnum,
           target_attnum = EXCLUDED.target_attnum, paused_until = NULL;
    -- This node's own vectorizers take ids after it.
    PERFORM setval('embed.vectorizers_id_seq', greatest(z.id, (SELECT last_value FROM embed.vectorizers_id_seq)));
END
$$;

-- On a worker: queues the keys of the rows of this node's shards of vectorizer `vid`'s table
-- that have a source and (unless every_row) no vector; returns how many.
CREATE FUNCTION embed._vectorize_queue_shards(vid integer, every_row boolean)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
SET extra_float_digits = 3 SET bytea_output = 'hex' SET lc_monetary = 'C' AS $$
DECLARE
    v embed.vectorizers;
    shard regclass;
    n integer;
    total integer := 0;
BEGIN
    SELECT * INTO STRICT v FROM embed.vectorizers WHERE id = vid;
    FOR shard IN EXECUTE 'SELECT to_regclass(pg_catalog.shard_name(s.logicalrelid, s.shardid, false))
                            FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = $1' USING v.tbl LOOP
        CONTINUE WHEN shard IS NULL;  -- a shard on another node
        EXECUTE format('INSERT INTO embed.vectorize_queue (vectorizer, key)
                        SELECT $1, t.%I::text FROM %s t WHERE t.%I IS NOT NULL AND ($2 OR t.%I IS NULL)
                           AND NOT EXISTS (SELECT FROM embed.vectorize_queue q WHERE q.vectorizer = $1 AND q.key = t.%I::text)',
                       v.key_column, shard, v.source_column, v.target_column, v.key_column)
            USING v.id, every_row;
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total + n;
    END LOOP;
    PERFORM embed._vectorize_launch(true);
    RETURN total;
END
$$;

-- On the coordinator, for embed.vectorize of a distributed table (the vectorizer `made`
-- already in embed.vectorizers here): gives every worker its copy, puts the queue trigger on
-- the distributed table (Citus carries it to the shards), then has each worker queue its
-- shards' rows. Returns the rows queued. A worker that refuses: the workers' copies are
-- removed again and the error names it.
CREATE FUNCTION embed._vectorize_citus(made embed.vectorizers, every_row boolean)
RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hosts text[];
    ports integer[];
    nodes text[];
    n integer;
    answers text[];
    failed integer;
    queued integer := 0;
    k integer;
BEGIN
    SELECT array_agg(w.host), array_agg(w.port), array_agg(w.node), count(*) INTO hosts, ports, nodes, n
      FROM embed._citus_workers() w;
    IF n = 0 THEN
        RETURN 0;
    END IF;
    answers := embed._run_on_workers(hosts, ports, array_fill(format('SELECT embed._on_node(%L)',
        format('SELECT embed._vectorize_node(%L::jsonb, %L)', to_jsonb(made) - 'tbl', made.tbl::text)), ARRAY[n]));
    failed := (SELECT min(i) FROM generate_subscripts(answers, 1) i WHERE answers[i] <> 'ok');
    IF failed IS NULL THEN
        BEGIN
            -- The trigger on every shard (Citus asks for this setting to allow it).
            PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
            PERFORM embed._vectorize_sync(made, false);
            answers := embed._run_on_workers(hosts, ports, array_fill(
                format('SELECT embed._vectorize_queue_shards(%s, %L)', made.id, every_row), ARRAY[n]));
            failed := (SELECT min(i) FROM generate_subscripts(answers, 1) i WHERE answers[i] !~ '^[0-9]+$');
            IF failed IS NULL THEN
                FOR k IN 1 .. n LOOP
                    queued := queued + answers[k]::integer;
                END LOOP;
                RETURN queued;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            answers := array_fill(SQLSTATE || ' ' || SQLERRM, ARRAY[n]);
            failed := 0;
        END;
    END IF;
    PERFORM embed._run_on_workers(hosts, ports, array_fill(format(
        'SELECT embed._on_node(%L)', format('DELETE FROM embed.vectorizers WHERE id = %s', made.id)), ARRAY[n]));
    IF failed = 0 THEN
        RAISE EXCEPTION 'embed.vectorize(%): %', made.tbl, substr(answers[1], 7) USING ERRCODE = left(answers[1], 5);
    END IF;
    RAISE EXCEPTION 'embed.vectorize(%): worker node % refused: %', made.tbl, nodes[failed], substr(answers[failed], 7)
        USING ERRCODE = CASE WHEN answers[failed] ~ '^[0-9A-Z]{5} ' THEN left(answers[failed], 5) ELSE 'XX000' END;
END
$$;

-- On the coordinator: removes the workers' copies of vectorizer `vid` (with their queues and
-- errors), before embed.unvectorize removes its trigger and function.
CREATE FUNCTION embed._unvectorize_citus(vid integer)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hosts text[];
    ports integer[];
    nodes text[];
    n integer;
    answers text[];
    failed integer;
BEGIN
    SELECT array_agg(w.host), array_agg(w.port), array_agg(w.node), count(*) INTO hosts, ports, nodes, n
      FROM embed._citus_workers() w;
    IF n = 0 THEN
        RETURN;
    END IF;
    answers := embed._run_on_workers(hosts, ports, array_fill(format(
        'SELECT embed._on_node(%L)', format('DELETE FROM embed.vectorizers WHERE id = %s', vid)), ARRAY[n]));
    failed := (SELECT min(k) FROM generate_subscripts(answers, 1) k WHERE answers[k] <> 'ok');
    IF failed IS NOT NULL THEN
        RAISE EXCEPTION 'embed.unvectorize: worker node % refused: %', nodes[failed], substr(answers[failed], 7)
            USING ERRCODE = left(answers[failed], 5);
    END IF;
END
$$;

-- On the coordinator: rows of vectorizer `vid` still queued on the workers (NULL when one
-- cannot be asked).
CREATE FUNCTION embed._citus_queued(vid integer)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hosts text[];
    ports integer[];
    n integer;
    answers text[];
BEGIN
    SELECT array_agg(w.host), array_agg(w.port), count(*) INTO hosts, ports, n FROM embed._citus_workers() w;
    IF n = 0 THEN
        RETURN 0;
    END IF;
    answers := embed._run_on_workers(hosts, ports, array_fill(format(
        'SELECT count(*) FROM embed.vectorize_queue WHERE vectorizer = %s', vid), ARRAY[n]));
    IF EXISTS (SELECT FROM unnest(answers) a WHERE a !~ '^[0-9]+$') THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT sum(a::bigint) FROM unnest(answers) a);
END
$$;

REVOKE ALL ON FUNCTION embed._vectorize_node(jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION embed._vectorize_queue_shards(integer, boolean) FROM PUBLIC;


-- Queued keys (text) as an array of the key's type (the type of `proto`, a NULL of it).
CREATE FUNCTION embed._keys(keys text[], proto anyelement)
RETURNS anyarray LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
SET extra_float_digits = 3 SET bytea_output = 'hex' SET lc_monetary = 'C' AS $$
DECLARE
    typed ALIAS FOR $0;
BEGIN
    EXECUTE format('SELECT $1::%s[]', pg_typeof(proto)) INTO typed USING keys;
    RETURN typed;
END
$$;

-- A vectorized table and every partition of it, at any depth.
CREATE FUNCTION embed._vectorized_tables(rel regclass)
RETURNS SETOF regclass LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT rel UNION SELECT p.relid FROM pg_partition_tree(rel) p
$$;

-- The statement trigger function of vectorizer `v` (embed._vectorize_enqueue_<id>, made by
-- embed._vectorize_sync for each vectorizer and made again when its columns change): records
-- the keys of inserted rows, and of updated rows unless a row of the same key had the same
-- source before and kept its vector (so a changed source, a changed key and a vector set to
-- NULL all queue the row; the workers' own writes do not). Static SQL, so that each session
-- plans it once (a writer pays about what pgai's queue trigger costs: bench/
-- vectorize_insert.sh). The settings above are set only for a key type whose text depends
-- on them. Runs as the extension's owner, so a writer needs no privilege on the queue.
CREATE FUNCTION embed._vectorize_enqueue_source(v embed.vectorizers)
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $src$
    SELECT format($f$CREATE OR REPLACE FUNCTION embed.%1$I() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp%2$s AS $body$
BEGIN%7$s
    IF TG_OP = 'INSERT' THEN
        INSERT INTO embed.vectorize_queue (vectorizer, key) SELECT %3$s, n.%4$I::text FROM pg_embed_new n;
    ELSE
        INSERT INTO embed.vectorize_queue (vectorizer, key)
        SELECT %3$s, n.%4$I::text FROM pg_embed_new n
         WHERE NOT EXISTS (SELECT FROM pg_embed_old o
                            WHERE o.%4$I = n.%4$I AND o.%5$I IS NOT DISTINCT FROM n.%5$I
                              AND (n.%6$I IS NOT NULL OR o.%6$I IS NULL));
    END IF;
    PERFORM embed._vectorize_launch(false);
    RETURN NULL;
END
$body$$f$,
        'pg_embed_vectorize_' || v.id,
        CASE WHEN v.key_type IN ('smallint'::regtype, 'integer'::regtype, 'bigint'::regtype, 'text'::regtype,
                                 'character varying'::regtype, 'character'::regtype, 'uuid'::regtype,
                                 'numeric'::regtype, 'boolean'::regtype, 'name'::regtype, 'oid'::regtype)
             THEN ''
             ELSE E'\nSET DateStyle = ''ISO, YMD'' SET IntervalStyle = ''postgres'' SET TimeZone = ''UTC''\n'
                  'SET extra_float_digits = 3 SET bytea_output = ''hex'' SET lc_monetary = ''C''' END,
        v.id, v.key_column, v.source_column, v.target_column,
        -- Where Citus is installed: a node that has no copy of the vectorizer (a node added,
        -- or a table distributed, after embed.vectorize) refuses the rows with a clear error.
        -- Elsewhere the lookup is left out (it cost a single-row INSERT 0.13x-0.2x of a plain
        -- one: bench/vectorize_insert.sh). In a database that installs Citus after
        -- embed.vectorize, the queue's foreign key refuses such rows (23503) until the
        -- function is made again (embed.vectorize on the coordinator, as the HINT says).
        CASE WHEN to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN format($c$
    IF NOT EXISTS (SELECT FROM embed.vectorizers WHERE id = %1$s) THEN
        RAISE EXCEPTION 'cannot queue the rows of %%: its vectorizer (%1$s) has no copy on this node', TG_TABLE_NAME
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Call embed.vectorize again on the Citus coordinator: it gives every node its copy '
                         '(a vectorized table with rows cannot be distributed: unvectorize it first).';
    END IF;$c$, v.id) ELSE '' END)
$src$;

-- (Re)makes the vectorizer's enqueue function and puts its triggers on its table and on
-- every partition of it (at any depth:
-- a statement on a partition fires that partition's statement triggers, not its parent's),
-- and removes them from tables that are no longer among them (a detached partition). With
-- queue_new, every row of a table that gets the triggers here (an attached partition: its
-- vectors may be stale, as its rows may have changed while it was detached) that has a
-- source or a vector is queued. Returns how many were.
CREATE FUNCTION embed._vectorize_sync(v embed.vectorizers, queue_new boolean)
RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
SET extra_float_digits = 3 SET bytea_output = 'hex' SET lc_monetary = 'C' AS $$
DECLARE
    name text := format('pg_embed_vectorize_%s', v.id);
    fn regprocedure;
    rel regclass;
    total integer := 0;
    n integer;
BEGIN
    -- The enqueue function, as the vectorizer's columns are now.
    EXECUTE embed._vectorize_enqueue_source(v);
    IF embed._citus_kind(v.tbl) IS NOT NULL THEN
        PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);  -- (Citus's conditions)
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    END IF;
    fn := format('embed.%I()', name)::regprocedure;
    IF queue_new AND NOT EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = v.tbl AND t.tgname = name || '_ins') THEN
        -- After DDL, with the table itself not yet given its triggers: a restore (pg_dump
        -- puts the vectorizers' rows before the triggers, which it creates itself).
        RETURN 0;
    END IF;
    -- Triggers on tables no longer covered go.
    FOR rel IN SELECT t.tgrelid::regclass FROM pg_trigger t
                WHERE t.tgname = name || '_ins' AND t.tgrelid NOT IN (SELECT embed._vectorized_tables(v.tbl))
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', name || '_ins', rel);
    END LOOP;
    FOR rel IN SELECT t.tgrelid::regclass FROM pg_trigger t
                WHERE t.tgname = name || '_upd' AND t.tgrelid NOT IN (SELECT embed._vectorized_tables(v.tbl))
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', name || '_upd', rel);
    END LOOP;
    FOR rel IN SELECT r FROM embed._vectorized_tables(v.tbl) r
                WHERE NOT EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = r AND t.tgname = name || '_upd')
    LOOP
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS pg_embed_old NEW TABLE AS pg_embed_new
                        FOR EACH STATEMENT EXECUTE FUNCTION %s', name || '_upd', rel, fn);
    END LOOP;
    FOR rel IN SELECT r FROM embed._vectorized_tables(v.tbl) r
                WHERE NOT EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = r AND t.tgname = name || '_ins')
    LOOP
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS pg_embed_new
                        FOR EACH STATEMENT EXECUTE FUNCTION %s', name || '_ins', rel, fn);
        IF queue_new AND (SELECT c.relkind FROM pg_class c WHERE c.oid = rel) = 'r' THEN
            EXECUTE format('INSERT INTO embed.vectorize_queue (vectorizer, key)
                            SELECT $1, t.%I::text FROM ONLY %s t WHERE t.%I IS NOT NULL OR t.%I IS NOT NULL',
                           v.key_column, rel, v.source_column, v.target_column)
                USING v.id;
            GET DIAGNOSTICS n = ROW_COUNT;
            total := total + n;
        END IF;
    END LOOP;
    RETURN total;
END
$$;

-- embed.vectorize(tbl, source_column, target_column, model, batch_size): keeps
-- target_column of tbl embedded from source_column by background workers; enqueues the
-- rows whose target is NULL (every row with a source when the model or source column
-- changed) and returns how many. The superuser, members of embed_admin and the table's
-- owner may call it; the workers read and write the table as the calling role.
CREATE OR REPLACE FUNCTION embed.vectorize(tbl regclass, source_column text, target_column text, model text,
                                batch_size integer DEFAULT 64)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
SET extra_float_digits = 3 SET bytea_output = 'hex' SET lc_monetary = 'C' AS $$
DECLARE
    caller regrole := embed._outer_role();
    keys text[];
    key_type regtype;
    previous embed.vectorizers;
    made embed.vectorizers;
    n integer;
    every_row boolean;
    citus text := embed._citus_kind(tbl);
BEGIN
    PERFORM embed._require_primary('embed.vectorize');
    IF batch_size IS NULL OR batch_size < 1 OR batch_size > 100000 THEN
        RAISE EXCEPTION 'batch_size must be between 1 and 100000, not %', coalesce(batch_size::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM embed._may_vectorize(tbl, 'vectorize');
    IF citus IN ('reference', 'local') THEN
        RAISE EXCEPTION 'cannot vectorize %: it is a Citus % table', tbl, citus
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Keep the column filled with embed.embed_trigger (citus.enable_unsafe_triggers = on), '
                         'or fill it with embed.backfill; see the README''s "Scaling out".';
    END IF;
    IF citus = 'distributed' AND NOT embed._citus_coordinator() THEN
        RAISE EXCEPTION 'cannot vectorize distributed table % on a worker node', tbl
            USING ERRCODE = 'feature_not_supported', HINT = 'Call embed.vectorize on the coordinator.';
    END IF;
    IF pg_partition_root(tbl) <> tbl THEN
        RAISE EXCEPTION 'cannot vectorize %: it is a partition of %', tbl, pg_partition_root(tbl)
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Vectorize the partitioned table: its partitions, also those attached later, are covered.';
    END IF;
    -- The columns, and the model's dimension against the target column's.
    PERFORM embed._check_target(tbl, model, source_column, target_column);
    SELECT array_agg(a.attname ORDER BY k.ord), (array_agg(a.atttypid ORDER BY k.ord))[1]::regtype
      INTO keys, key_type
      FROM pg_index i
      CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = tbl AND i.indisprimary;
    IF keys IS NULL OR array_length(keys, 1) <> 1 THEN
        RAISE EXCEPTION 'embed.vectorize needs a primary key of one column on %, not %', tbl,
            coalesce('(' || array_to_string(keys, ', ') || ')', 'none')
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Add a one-column primary key, or keep the column filled with embed.embed_trigger.';
    END IF;
    SELECT * INTO previous FROM embed.vectorizers v WHERE v.tbl = vectorize.tbl AND v.target_column = vectorize.target_column;
    every_row := FOUND AND (previous.model <> vectorize.model OR previous.source_column <> vectorize.source_column);
    INSERT INTO embed.vectorizers AS z (tbl, source_column, target_column, model, batch_size, key_column, key_type, owner,
                                        key_attnum, source_attnum, target_attnum)
    SELECT tbl, source_column, target_column, model, batch_size, keys[1], key_type, caller,
           (SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = keys[1]),
           (SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = source_column),
           (SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = target_column)
    ON CONFLICT ON CONSTRAINT vectorizers_tbl_target_column_key DO UPDATE
       SET source_column = EXCLUDED.source_column, model = EXCLUDED.model, batch_size = EXCLUDED.batch_size,
           key_column = EXCLUDED.key_column, key_type = EXCLUDED.key_type, owner = EXCLUDED.owner,
           key_attnum = EXCLUDED.key_attnum, source_attnum = EXCLUDED.source_attnum,
           target_attnum = EXCLUDED.target_attnum, paused_until = NULL
    RETURNING z.* INTO made;
    IF citus = 'distributed' THEN
        RETURN embed._vectorize_citus(made, every_row);
    END IF;
    PERFORM embed._vectorize_sync(made, false);
    EXECUTE format('INSERT INTO embed.vectorize_queue (vectorizer, key)
                    SELECT $1, t.%I::text FROM %s t WHERE t.%I IS NOT NULL AND ($2 OR t.%I IS NULL)
                       AND NOT EXISTS (SELECT FROM embed.vectorize_queue q WHERE q.vectorizer = $1 AND q.key = t.%I::text)',
                   keys[1], tbl, source_column, target_column, keys[1])
        USING made.id, every_row;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM embed._vectorize_launch(true);
    RETURN n;
END
$$;

-- embed.unvectorize(tbl, target_column): removes the triggers, the queue and the errors of
-- that vectorizer (the column keeps its vectors).
CREATE OR REPLACE FUNCTION embed.unvectorize(tbl regclass, target_column text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v embed.vectorizers;
BEGIN
    PERFORM embed._require_primary('embed.unvectorize');
    v := embed._vectorizer(tbl, target_column);
    PERFORM embed._may_vectorize(tbl, 'unvectorize');
    -- The vectorizer first: the DDL trigger refuses to drop the triggers of one that exists
    -- (on a Citus coordinator, the workers' copies first).
    IF embed._citus_kind(tbl) = 'distributed' THEN
        PERFORM embed._unvectorize_citus(v.id);
    END IF;
    DELETE FROM embed.vectorizers WHERE id = v.id;
    PERFORM embed._vectorize_drop_triggers(v.id);
END
$$;

-- Embeds the rows of `keys` (as the vectorizer's owner) and writes their vectors; a failing
-- set is split in halves until the failing keys are found and recorded. Returns the rows
-- written.
CREATE OR REPLACE FUNCTION embed._vectorize_keys(v embed.vectorizers, keys text[], ids bigint[])
RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n integer;
    half integer;
    state text;
    msg text;
    kind text := embed._source_kind(v.tbl, v.source_column);
    writer record := embed._writer(v.tbl, v.model, v.source_column, v.target_column);
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', (SELECT rolname FROM pg_roles WHERE oid = v.owner));
        -- The table's own triggers and defaults run with the usual search_path, not this
        -- function's.
        SET LOCAL search_path TO DEFAULT;
        EXECUTE format(
            'WITH rows AS MATERIALIZED (
                 SELECT t.%1$I AS k, t.%2$I%6$s AS s, row_number() OVER (ORDER BY t.%1$I) AS ord
                   FROM %3$s t WHERE t.%1$I IN (SELECT unnest(embed._keys($1, NULL::%4$s))) AND t.%2$I IS NOT NULL),
                  vecs AS (SELECT e.vec, e.ord FROM @extschema@.%5$s($2, ARRAY(SELECT s FROM rows ORDER BY ord))
                                                    WITH ORDINALITY AS e(vec, ord))
             UPDATE %3$s t SET %7$I = vecs.vec%8$s FROM rows JOIN vecs USING (ord)
              WHERE t.%1$I = rows.k AND t.%2$I%6$s = rows.s',
            -- (The source compared again: a row whose source a writer changed meanwhile is
            -- left to that writer's queue entry, not given the old source's vector.)
            v.key_column, v.source_column, v.tbl, v.key_type, writer.fn,
            CASE WHEN kind = 'image' THEN '' ELSE '::text' END, v.target_column, writer.cast_to)
            USING keys, v.model;
        GET DIAGNOSTICS n = ROW_COUNT;
        -- A source set to NULL: the vector goes too.
        EXECUTE format('UPDATE %1$s t SET %3$I = NULL WHERE t.%2$I IN (SELECT unnest(embed._keys($1, NULL::%4$s)))
                          AND t.%5$I IS NULL AND t.%3$I IS NOT NULL',
                       v.tbl, v.key_column, v.target_column, v.key_type, v.source_column)
            USING keys;
        RESET ROLE;
        DELETE FROM embed.vectorize_errors e WHERE e.vectorizer = v.id AND e.key = ANY (keys);
        RETURN n;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    END;
    IF array_length(keys, 1) > 1 THEN
        half := array_length(keys, 1) / 2;
        RETURN embed._vectorize_keys(v, keys[1:half], ids) + embed._vectorize_keys(v, keys[half + 1:], ids);
    END IF;
    PERFORM embed._vectorize_failed(v, keys[1], ids, state, msg);
    RETURN 0;
END
$$;

-- Removes the triggers of vectorizer `vid` from every table that has them, and its enqueue
-- function.
CREATE FUNCTION embed._vectorize_drop_triggers(vid integer)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t record;
    -- A Citus worker: its copies of distributed tables (the partitions of a dropped
    -- partitioned table, say) take DDL from the coordinator only, which drops their triggers.
    worker boolean := to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL AND NOT embed._citus_coordinator();
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        -- (A distributed table's triggers, and its function afterwards on one connection a node.)
        PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    END IF;
    FOR t IN SELECT g.tgname, g.tgrelid::regclass AS rel FROM pg_trigger g
              WHERE g.tgname IN (format('pg_embed_vectorize_%s_ins', vid), format('pg_embed_vectorize_%s_upd', vid))
    LOOP
        CONTINUE WHEN worker AND embed._citus_kind(t.rel) IS NOT NULL;
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', t.tgname, t.rel);
    END LOOP;
    -- On a Citus worker the function of a coordinator's vectorizer is the coordinator's to drop.
    IF worker AND to_regprocedure(format('embed.%I()', 'pg_embed_vectorize_' || vid)) IS NOT NULL THEN
        RETURN;
    END IF;
    -- CASCADE: on a Citus coordinator, a shard moved away leaves its old copy (with this
    -- function's trigger) on the old node until Citus removes it.
    EXECUTE format('DROP FUNCTION IF EXISTS embed.%I() CASCADE', 'pg_embed_vectorize_' || vid);
END
$$;

-- After ALTER TABLE and CREATE TABLE: every vectorizer follows renames of its columns (by
-- number), a new type of its key (queued keys and error keys converted) and of its source
-- and target (checked again: a target that no longer fits the model is refused), and its
-- table's partitions (attached or created ones get the triggers and their rows without a
-- vector are queued; detached ones lose the triggers). A vectorized table made a partition
-- of another is refused.
CREATE FUNCTION embed._vectorize_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
SET extra_float_digits = 3 SET bytea_output = 'hex' SET lc_monetary = 'C' AS $$
DECLARE
    v embed.vectorizers;
    now_key name;
    now_source name;
    now_target name;
    now_key_type regtype;
    now_key_attnum smallint;
    now_source_attnum smallint;
    now_target_attnum smallint;
BEGIN
    FOR v IN SELECT * FROM embed.vectorizers z WHERE EXISTS (SELECT FROM pg_class c WHERE c.oid = z.tbl) ORDER BY z.id LOOP
        IF pg_partition_root(v.tbl) <> v.tbl THEN
            RAISE EXCEPTION 'cannot make % a partition of %: it is vectorized', v.tbl, pg_partition_root(v.tbl)
                USING ERRCODE = 'feature_not_supported',
                      HINT = format('Call embed.unvectorize(%L, %L) first, then vectorize the partitioned table.',
                                    v.tbl::text, v.target_column);
        END IF;
        -- A column of the recorded name is the column (its number may differ: a restored
        -- table has no dropped columns); otherwise the column of the recorded number is it,
        -- renamed.
        SELECT a.attname, a.attnum, a.atttypid::regtype INTO now_key, now_key_attnum, now_key_type
          FROM pg_attribute a WHERE a.attrelid = v.tbl AND NOT a.attisdropped AND a.attnum > 0
           AND (a.attname = v.key_column OR a.attnum = v.key_attnum)
         ORDER BY a.attname = v.key_column DESC LIMIT 1;
        SELECT a.attname, a.attnum INTO now_source, now_source_attnum
          FROM pg_attribute a WHERE a.attrelid = v.tbl AND NOT a.attisdropped AND a.attnum > 0
           AND (a.attname = v.source_column OR a.attnum = v.source_attnum)
         ORDER BY a.attname = v.source_column DESC LIMIT 1;
        SELECT a.attname, a.attnum INTO now_target, now_target_attnum
          FROM pg_attribute a WHERE a.attrelid = v.tbl AND NOT a.attisdropped AND a.attnum > 0
           AND (a.attname = v.target_column OR a.attnum = v.target_attnum)
         ORDER BY a.attname = v.target_column DESC LIMIT 1;
        IF now_key_type <> v.key_type THEN
            -- Queued keys and error keys as the new type's text (a key the new type cannot
            -- take refuses the change).
            EXECUTE format('UPDATE embed.vectorize_queue SET key = key::%s::%s::text WHERE vectorizer = $1',
                           v.key_type, now_key_type) USING v.id;
            EXECUTE format('UPDATE embed.vectorize_errors SET key = key::%s::%s::text WHERE vectorizer = $1 AND key IS NOT NULL',
                           v.key_type, now_key_type) USING v.id;
        END IF;
        IF (now_key, now_source, now_target, now_key_type, now_key_attnum, now_source_attnum, now_target_attnum)
           IS DISTINCT FROM (v.key_column::name, v.source_column::name, v.target_column::name, v.key_type,
                             v.key_attnum, v.source_attnum, v.target_attnum) THEN
            UPDATE embed.vectorizers
               SET key_column = now_key, source_column = now_source, target_column = now_target, key_type = now_key_type,
                   key_attnum = now_key_attnum, source_attnum = now_source_attnum, target_attnum = now_target_attnum
             WHERE id = v.id
            RETURNING * INTO v;
        END IF;
        -- The target (and the source's kind) against the model, when the model is registered.
        IF EXISTS (SELECT FROM embed.models m WHERE m.name = v.model) THEN
            PERFORM embed._check_target(v.tbl, v.model, v.source_column, v.target_column);
        END IF;
        -- A worker's copy of a coordinator's vectorizer: the coordinator keeps its function
        -- and trigger (Citus carries both to this node).
        CONTINUE WHEN embed._citus_kind(v.tbl) IS NOT NULL AND NOT embed._citus_coordinator();
        PERFORM embed._vectorize_sync(v, true);
    END LOOP;
END
$$;

-- sql_drop: a dropped vectorized table takes its vectorizer (and queue, errors and enqueue
-- function) along; dropping the key, source or target column of a vectorized table, or its
-- vectorizer's enqueue function or one of its triggers (from a table it covers, and not as
-- part of dropping that table), is refused.
CREATE FUNCTION embed._vectorize_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    o record;
    v record;
BEGIN
    IF to_regclass('embed.vectorizers') IS NULL THEN
        RETURN; -- DROP EXTENSION pg_embed
    END IF;
    FOR o IN SELECT * FROM pg_event_trigger_dropped_objects() d WHERE d.object_type = 'table' LOOP
        FOR v IN DELETE FROM embed.vectorizers z WHERE z.tbl::oid = o.objid RETURNING z.id LOOP
            PERFORM embed._vectorize_drop_triggers(v.id);
        END LOOP;
    END LOOP;
    SELECT d.object_identity, z.tbl, z.target_column INTO v
      FROM pg_event_trigger_dropped_objects() d
      JOIN embed.vectorizers z ON
           (d.object_type = 'table column' AND z.tbl::oid = d.objid
            AND d.address_names[3] IN (z.key_column, z.source_column, z.target_column))
        OR (d.object_type = 'function' AND d.object_identity = format('embed.%I()', 'pg_embed_vectorize_' || z.id))
        OR (d.object_type = 'trigger' AND d.original
            AND d.address_names[3] IN (format('pg_embed_vectorize_%s_ins', z.id), format('pg_embed_vectorize_%s_upd', z.id))
            AND to_regclass(format('%I.%I', d.address_names[1], d.address_names[2])) IN (SELECT embed._vectorized_tables(z.tbl)))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'cannot drop %: % is vectorized', v.object_identity, v.tbl
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = format('Call embed.unvectorize(%L, %L) first.', v.tbl::text, v.target_column);
    END IF;
END
$$;

-- 0.3.0's triggers called one function for every vectorizer (embed._vectorize_enqueue);
-- each vectorizer now has its own (embed._vectorize_sync below makes them). Removed before
-- the event triggers that refuse dropping a vectorizer's triggers exist.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT g.tgname, g.tgrelid::regclass AS rel FROM pg_catalog.pg_trigger g
              WHERE g.tgfoid = 'embed._vectorize_enqueue()'::regprocedure
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
    END LOOP;
END
$$;
DROP FUNCTION embed._vectorize_enqueue();

CREATE EVENT TRIGGER pg_embed_vectorize_ddl ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE', 'CREATE TABLE')
    EXECUTE FUNCTION embed._vectorize_ddl();
CREATE EVENT TRIGGER pg_embed_vectorize_drop ON sql_drop
    EXECUTE FUNCTION embed._vectorize_drop();

-- Every vectorizer's triggers on all its partitions (0.3.0 put them on the table only, so a
-- row inserted straight into a partition was never queued), and its rows without a vector
-- queued once: they may be such rows. (Keys queued by 0.3.0 were written in the writer's
-- DateStyle and TimeZone; run embed.vectorize_wait before upgrading if keys are dates or
-- times and writers used other settings than ISO.)
SELECT embed._vectorize_sync(z, false) FROM embed.vectorizers z ORDER BY z.id;
DO $$
DECLARE
    v embed.vectorizers;
BEGIN
    FOR v IN SELECT * FROM embed.vectorizers ORDER BY id LOOP
        -- Made by this script, the function would be a member of the extension; like those
        -- embed.vectorize makes, it is the vectorizer's (pg_dump keeps it).
        EXECUTE format('ALTER EXTENSION pg_embed DROP FUNCTION embed.%I()', 'pg_embed_vectorize_' || v.id);
        EXECUTE format('INSERT INTO embed.vectorize_queue (vectorizer, key)
                        SELECT $1, t.%1$I::text FROM %2$s t WHERE t.%3$I IS NOT NULL AND t.%4$I IS NULL
                           AND NOT EXISTS (SELECT FROM embed.vectorize_queue q WHERE q.vectorizer = $1 AND q.key = t.%1$I::text)',
                       v.key_column, v.tbl, v.source_column, v.target_column)
            USING v.id;
    END LOOP;
END
$$;

CREATE OR REPLACE PROCEDURE embed.backfill(tbl regclass, source_column text, target_column text, model text,
                                batch_size integer DEFAULT 64)
-- No SET clause: a procedure with one cannot COMMIT. It runs as the caller; the names it
-- uses are schema-qualified.
LANGUAGE plpgsql AS $$
DECLARE
    run bigint;
    total bigint;
    done bigint := 0;
    n bigint;
    started timestamptz;
    elapsed float8;
    ids tid[];
    texts text[];
    images bytea[];
    is_image boolean;
    after_tid tid := '(0,0)';
    window_end tid;
    window_start bigint := 0;
    window_blocks bigint;
    pages bigint;
    select_batch text;
    update_batch text;
    writer record;
BEGIN
    PERFORM embed._require_primary('embed.backfill');
    IF batch_size IS NULL OR batch_size < 1 THEN
        RAISE EXCEPTION 'batch_size must be at least 1, not %', coalesce(batch_size::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM embed._check_target(tbl, model, source_column, target_column);
    -- A Citus table: ctids repeat across its shards, so each node fills its own shards.
    IF embed._citus_kind(tbl) IS NOT NULL THEN
        PERFORM embed._backfill_shards(tbl, source_column, target_column, model, batch_size);
        RETURN;
    END IF;
    is_image := embed._source_kind(tbl, source_column) = 'image';
    writer := embed._writer(tbl, model, source_column, target_column);
    EXECUTE format('SELECT count(*) FROM %s WHERE %I IS NULL AND %I IS NOT NULL', tbl, target_column, source_column)
        INTO total;
    run := embed._backfill_start(tbl, source_column, target_column, model, batch_size, total);
    COMMIT;
    started := clock_timestamp();
    PERFORM pg_advisory_xact_lock(1701667941, (run % 2147483648)::integer);

    -- Rows are visited in physical order, a window of blocks at a time (a TID range scan),
    -- so each batch reads only its window, however much of the table is already filled.
    pages := pg_relation_size(tbl) / current_setting('block_size')::bigint;
    SELECT greatest(1, ceil(4.0 * batch_size / greatest(c.reltuples / greatest(c.relpages, 1), 1)))::bigint
      INTO window_blocks FROM pg_class c WHERE c.oid = tbl;
    select_batch := format(
        'SELECT array_agg(ctid ORDER BY ctid), array_agg(%1$I%4$s ORDER BY ctid)
           FROM (SELECT ctid, %1$I FROM %2$s
                  WHERE ctid > $1 AND ctid < $2 AND %3$I IS NULL AND %1$I IS NOT NULL
                  ORDER BY ctid LIMIT $3) s',
        source_column, tbl, target_column, CASE WHEN is_image THEN '' ELSE '::text' END);
    update_batch := format(
        'UPDATE %s t SET %I = v.vec%s
           FROM unnest($1::tid[]) WITH ORDINALITY AS k(id, ord)
           JOIN @extschema@.%s($2, $3) WITH ORDINALITY AS v(vec, ord) USING (ord)
          WHERE t.ctid = k.id AND t.%I IS NULL',
        tbl, target_column, writer.cast_to, writer.fn, target_column);
    LOOP
        -- The last window is open-ended: it also takes rows added since the run started.
        window_end := CASE WHEN window_start + window_blocks < pages
                           THEN format('(%s,0)', window_start + window_blocks)::tid
                           ELSE '(4294967295,65535)'::tid END;
        IF is_image THEN
            EXECUTE select_batch INTO ids, images USING after_tid, window_end, batch_size;
        ELSE
            EXECUTE select_batch INTO ids, texts USING after_tid, window_end, batch_size;
        END IF;
        IF ids IS NULL THEN
            EXIT WHEN window_start + window_blocks >= pages;
            window_start := window_start + window_blocks;
            after_tid := format('(%s,0)', window_start)::tid;
            CONTINUE;
        END IF;
        IF is_image THEN
            EXECUTE update_batch USING ids, model, images;
        ELSE
            EXECUTE update_batch USING ids, model, texts;
        END IF;
        GET DIAGNOSTICS n = ROW_COUNT;
        done := done + n;
        after_tid := ids[array_length(ids, 1)];
        PERFORM embed._backfill_step(run, done, false);
        COMMIT;
        PERFORM pg_advisory_xact_lock(1701667941, (run % 2147483648)::integer);
        elapsed := extract(epoch FROM clock_timestamp() - started);
        RAISE NOTICE 'backfill %.%: % of % rows (% %%), % rows/s, ETA %',
            tbl, target_column, done, total,
            CASE WHEN total > 0 THEN round(100.0 * done / total, 1) ELSE 100 END,
            round((done / greatest(elapsed, 1e-6))::numeric, 1),
            CASE WHEN done >= total THEN interval '0'
                 ELSE make_interval(secs => round(((total - done) * elapsed / done)::numeric, 0)::float8) END;
    END LOOP;
    PERFORM embed._backfill_step(run, done, true);
    COMMIT;
    elapsed := extract(epoch FROM clock_timestamp() - started);
    RAISE NOTICE 'backfill %.%: done, % rows in % s (% rows/s)',
        tbl, target_column, done, round(elapsed::numeric, 1), round((done / greatest(elapsed, 1e-6))::numeric, 1);
END
$$;

CREATE OR REPLACE FUNCTION embed._preload_on_login() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- Not for Citus's own connections between nodes (a distributed query opens one per
    -- shard group; most never call embed(), and one that does loads the model then).
    IF coalesce(current_setting('pg_embed.preload', true), '') <> ''
       AND current_setting('application_name') !~ '^citus_(internal|rebalancer|run_command) gpid='
       AND current_setting('application_name') NOT LIKE 'citus\_shard\_%' THEN
        BEGIN
            PERFORM embed.preload();
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'pg_embed.preload: %', SQLERRM;
        END;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION embed.vectorize_wait(tbl regclass, target_column text, timeout interval DEFAULT '1 minute')
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    vid integer := (embed._vectorizer(tbl, target_column)).id;
    deadline timestamptz := clock_timestamp() + timeout;
    distributed boolean := embed._citus_kind(tbl) = 'distributed';
BEGIN
    IF timeout IS NULL THEN
        RAISE EXCEPTION 'timeout must not be NULL'
            USING ERRCODE = 'null_value_not_allowed', HINT = 'Give an interval, e.g. ''5 minutes''.';
    END IF;
    PERFORM embed._vectorize_launch(false);
    LOOP
        -- (A distributed table's rows are queued on the workers that hold them.)
        IF NOT EXISTS (SELECT FROM embed.vectorize_queue q WHERE q.vectorizer = vid)
           AND (NOT coalesce(distributed, false) OR embed._citus_queued(vid) = 0) THEN
            RETURN true;
        END IF;
        IF clock_timestamp() >= deadline THEN
            RETURN false;
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
END
$$;
