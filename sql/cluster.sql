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
