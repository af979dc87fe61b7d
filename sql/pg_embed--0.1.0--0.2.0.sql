-- pg_embed 0.1.0 -> 0.2.0. Run by ALTER EXTENSION pg_embed UPDATE; tests/ops/upgrade.sh checks
-- that a database upgraded with it has exactly the objects of a fresh 0.2.0 install.
\echo Use "ALTER EXTENSION pg_embed UPDATE TO '0.2.0'" to load this file. \quit

-- Calls that write (embed.vectorize, embed.backfill, ...) run on the primary only: on a hot
-- standby they stop at once, saying where to run them (as register_model does in Rust).
CREATE FUNCTION embed._require_primary(function text)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF pg_is_in_recovery() THEN
        RAISE EXCEPTION '% cannot run on a hot standby: it writes to the database', function
            USING ERRCODE = 'read_only_sql_transaction',
                  HINT = 'Run it on the primary: what it writes reaches this standby by replication. '
                         'embed(), classify() and the other read-only calls work here.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION embed.vectorize(tbl regclass, source_column text, target_column text, model text,
                                batch_size integer DEFAULT 64)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    caller regrole := embed._outer_role();
    keys text[];
    key_type regtype;
    previous embed.vectorizers;
    vid integer;
    n integer;
    every_row boolean;
    trigger_name text;
BEGIN
    PERFORM embed._require_primary('embed.vectorize');
    IF batch_size IS NULL OR batch_size < 1 OR batch_size > 100000 THEN
        RAISE EXCEPTION 'batch_size must be between 1 and 100000, not %', coalesce(batch_size::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM embed._may_vectorize(tbl, 'vectorize');
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
    INSERT INTO embed.vectorizers AS v (tbl, source_column, target_column, model, batch_size, key_column, key_type, owner)
    VALUES (tbl, source_column, target_column, model, batch_size, keys[1], key_type, caller)
    ON CONFLICT ON CONSTRAINT vectorizers_tbl_target_column_key DO UPDATE
       SET source_column = EXCLUDED.source_column, model = EXCLUDED.model, batch_size = EXCLUDED.batch_size,
           key_column = EXCLUDED.key_column, key_type = EXCLUDED.key_type, owner = EXCLUDED.owner,
           paused_until = NULL
    RETURNING v.id INTO vid;
    trigger_name := format('pg_embed_vectorize_%s', vid);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', trigger_name || '_ins', tbl);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', trigger_name || '_upd', tbl);
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS pg_embed_new
                    FOR EACH STATEMENT EXECUTE FUNCTION embed._vectorize_enqueue(%s)', trigger_name || '_ins', tbl, vid);
    EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS pg_embed_old NEW TABLE AS pg_embed_new
                    FOR EACH STATEMENT EXECUTE FUNCTION embed._vectorize_enqueue(%s)', trigger_name || '_upd', tbl, vid);
    EXECUTE format('INSERT INTO embed.vectorize_queue (vectorizer, key)
                    SELECT $1, t.%I::text FROM %s t WHERE t.%I IS NOT NULL AND ($2 OR t.%I IS NULL)
                       AND NOT EXISTS (SELECT FROM embed.vectorize_queue q WHERE q.vectorizer = $1 AND q.key = t.%I::text)',
                   keys[1], tbl, source_column, target_column, keys[1])
        USING vid, every_row;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM embed._vectorize_launch(true);
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION embed.unvectorize(tbl regclass, target_column text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v embed.vectorizers;
BEGIN
    PERFORM embed._require_primary('embed.unvectorize');
    v := embed._vectorizer(tbl, target_column);
    PERFORM embed._may_vectorize(tbl, 'unvectorize');
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', format('pg_embed_vectorize_%s_ins', v.id), tbl);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', format('pg_embed_vectorize_%s_upd', v.id), tbl);
    DELETE FROM embed.vectorizers WHERE id = v.id;
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
BEGIN
    PERFORM embed._require_primary('embed.backfill');
    IF batch_size IS NULL OR batch_size < 1 THEN
        RAISE EXCEPTION 'batch_size must be at least 1, not %', coalesce(batch_size::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM embed._check_target(tbl, model, source_column, target_column);
    is_image := embed._source_kind(tbl, source_column) = 'image';
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
        'UPDATE %s t SET %I = v.vec
           FROM unnest($1::tid[]) WITH ORDINALITY AS k(id, ord)
           JOIN @extschema@.%s($2, $3) WITH ORDINALITY AS v(vec, ord) USING (ord)
          WHERE t.ctid = k.id AND t.%I IS NULL',
        tbl, target_column, CASE WHEN is_image THEN 'embed_image' ELSE 'embed' END, target_column);
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

-- embed.backfill_runs.relid becomes regclass (it was oid): a dump names the table, so a
-- restore points at the restored table, not at a stale oid.
DROP VIEW embed.backfill_progress;
ALTER TABLE embed.backfill_runs ALTER COLUMN relid TYPE regclass;
CREATE VIEW embed.backfill_progress AS
SELECT r.id, r.relid AS relation, r.source_column, r.target_column, r.model, r.batch_size, r.pid, r.started_by,
       r.started_at, r.updated_at, r.finished_at, r.rows_total, r.rows_done, r.batches,
       CASE
           WHEN r.finished_at IS NOT NULL THEN 'done'
           WHEN EXISTS (SELECT FROM pg_catalog.pg_locks l
                         WHERE l.locktype = 'advisory' AND l.pid = r.pid AND l.granted
                           AND l.classid = 1701667941 AND l.objid = (r.id % 2147483648)::integer::oid)
               THEN 'running'
           ELSE 'interrupted'
       END AS state,
       round((r.rows_done / NULLIF(extract(epoch FROM r.updated_at - r.started_at), 0))::numeric, 1)
           AS rows_per_second,
       CASE WHEN r.finished_at IS NULL AND r.rows_done > 0
            THEN (r.updated_at - r.started_at) * ((r.rows_total - r.rows_done)::float8 / r.rows_done)
       END AS eta
  FROM embed.backfill_runs r;
GRANT SELECT ON embed.backfill_progress TO PUBLIC;

-- pg_dump keeps the vectorizers, their queue and errors, and the backfill runs.
SELECT pg_catalog.pg_extension_config_dump('embed.vectorizers', '');
SELECT pg_catalog.pg_extension_config_dump('embed.vectorizers_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('embed.vectorize_queue', '');
SELECT pg_catalog.pg_extension_config_dump('embed.vectorize_queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('embed.vectorize_errors', '');
SELECT pg_catalog.pg_extension_config_dump('embed.backfill_runs', '');
SELECT pg_catalog.pg_extension_config_dump('embed.backfill_runs_id_seq', '');
