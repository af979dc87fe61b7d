-- pg_embed in-database workflow: the trigger that keeps a vector column filled, the
-- resumable backfill with its progress, and preloading models at login. Plain SQL and
-- PL/pgSQL over the inference functions; they run as the calling role.

-- What a source column holds: 'image' for bytea (image files, embedded with embed_image),
-- 'text' for anything else (cast to text and embedded with embed). NULL if no such column.
CREATE FUNCTION embed._source_kind(rel regclass, source_column text)
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN a.atttypid = 'bytea'::regtype THEN 'image' ELSE 'text' END
      FROM pg_attribute a
     WHERE a.attrelid = rel AND a.attname = source_column AND a.attnum > 0 AND NOT a.attisdropped
$$;

-- Refuses a bytea source column for a model of text, and a text source column for a model of
-- images (a registered model; an unregistered one is checked when it is first used).
CREATE FUNCTION embed._check_source(rel regclass, model text, source_column text)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kind text := embed._source_kind(rel, source_column);
    model_modality text;
BEGIN
    SELECT m.modality INTO model_modality FROM embed.models m WHERE m.name = model;
    IF kind IS NULL OR model_modality IS NULL OR model_modality = 'both' OR model_modality = kind THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'column "%" of relation % holds %, but model "%" takes %',
        source_column, rel, CASE kind WHEN 'image' THEN 'images (bytea)' ELSE 'text' END, model,
        CASE model_modality WHEN 'image' THEN 'images' ELSE 'text' END
        USING ERRCODE = 'datatype_mismatch',
              HINT = CASE model_modality WHEN 'image'
                  THEN 'A model of images embeds a bytea column of image files (PNG, JPEG, WebP, GIF, BMP, TIFF).'
                  ELSE 'A model of text embeds a text column; register an image model (ViT, CLIP, DINOv2) for a bytea column.' END;
END
$$;

-- Checks that `rel` has a source column `source_column` that `model` can embed (text, or
-- bytea image files for a model of images) and a column `target_column` that can hold
-- `model`'s output: vector(n) or halfvec(n) with n = the model's dim, or real[]; for a
-- sparse model (task 'sparse'), sparsevec(n) with n = its vocabulary size; for a
-- late-interaction model (task 'multi'), real[] (a 2-D array: a row per token).
-- Returns the model's dim.
CREATE FUNCTION embed._check_target(rel regclass, model text, source_column text, target_column text)
RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    model_dim integer;
    model_task text;
    info jsonb;
    target_type text;
    target_mod integer;
    target_typname name;
BEGIN
    IF rel IS NULL OR model IS NULL OR source_column IS NULL OR target_column IS NULL THEN
        RAISE EXCEPTION 'table, model, source column and target column must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = rel AND attname = source_column
                   AND attnum > 0 AND NOT attisdropped) THEN
        RAISE EXCEPTION 'column "%" of relation % does not exist', source_column, rel
            USING ERRCODE = 'undefined_column';
    END IF;
    SELECT format_type(a.atttypid, a.atttypmod), a.atttypmod, t.typname
      INTO target_type, target_mod, target_typname
      FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
     WHERE a.attrelid = rel AND a.attname = target_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of relation % does not exist', target_column, rel
            USING ERRCODE = 'undefined_column';
    END IF;
    SELECT m.dim, m.task INTO model_dim, model_task FROM embed.models m WHERE m.name = model;
    IF model_dim IS NULL THEN
        -- Not registered: model_info raises the usual error (or auto-registers the model).
        info := embed.model_info(model);
        model_dim := (info ->> 'dim')::integer;
        model_task := info ->> 'task';
    END IF;
    PERFORM embed._check_source(rel, model, source_column);
    IF model_task = 'sparse' THEN
        IF target_typname <> 'sparsevec' THEN
            RAISE EXCEPTION 'column "%" of relation % has type %, but model "%" gives sparse vectors',
                target_column, rel, target_type, model
                USING ERRCODE = 'datatype_mismatch',
                      HINT = format('Use a sparsevec(%s) column (pgvector).', model_dim);
        END IF;
        IF target_mod > 0 AND target_mod <> model_dim THEN
            RAISE EXCEPTION 'column "%" of relation % has % dimensions, but model "%" gives sparse vectors of %',
                target_column, rel, target_mod, model, model_dim
                USING ERRCODE = 'datatype_mismatch',
                      HINT = format('Use a sparsevec(%s) column: the model''s vocabulary size.', model_dim);
        END IF;
    ELSIF model_task = 'multi' THEN
        IF target_typname <> '_float4' THEN
            RAISE EXCEPTION 'column "%" of relation % has type %, but model "%" gives token vectors (a 2-D array)',
                target_column, rel, target_type, model
                USING ERRCODE = 'datatype_mismatch',
                      HINT = 'Use a real[] column: one row of the array per token (embed_multi).';
        END IF;
    ELSIF target_typname IN ('vector', 'halfvec') THEN
        IF target_mod > 0 AND target_mod <> model_dim THEN
            RAISE EXCEPTION 'column "%" of relation % has % dimensions, but model "%" gives %',
                target_column, rel, target_mod, model, model_dim
                USING ERRCODE = 'datatype_mismatch',
                      HINT = format('Use a %s(%s) column, or a model with %s dimensions.',
                                    target_typname, model_dim, target_mod);
        END IF;
    ELSIF target_typname NOT IN ('_float4') THEN
        RAISE EXCEPTION 'column "%" of relation % has type %, which cannot hold embeddings',
            target_column, rel, target_type
            USING ERRCODE = 'datatype_mismatch',
                  HINT = CASE WHEN target_typname = 'sparsevec'
                      THEN format('Model "%s" gives dense vectors: use vector(%s), halfvec(%s) or real[]; a sparsevec column takes a sparse model (embed_sparse).', model, model_dim, model_dim)
                      ELSE format('Use vector(%s), halfvec(%s) or real[].', model_dim, model_dim) END;
    END IF;
    RETURN model_dim;
END
$$;

-- How the workflow computes `model`'s output for `source_column` of `rel` and writes it
-- into `target_column`: the function (embed, embed_image for a bytea source, embed_sparse for
-- a sparse model, embed_multi for a late-interaction one) and what its result is cast to (''
-- for the arrays of embed, embed_image and embed_multi; the column's type for embed_sparse's
-- text). Call after embed._check_target.
CREATE FUNCTION embed._writer(rel regclass, model text, source_column text, target_column text,
                              OUT fn text, OUT cast_to text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    task text;
BEGIN
    cast_to := '';
    IF embed._source_kind(rel, source_column) = 'image' THEN
        fn := 'embed_image';
        RETURN;
    END IF;
    task := coalesce((SELECT m.task FROM embed.models m WHERE m.name = model), embed.model_info(model) ->> 'task');
    IF task = 'sparse' THEN
        fn := 'embed_sparse';
        SELECT '::' || format_type(a.atttypid, a.atttypmod) INTO cast_to
          FROM pg_attribute a WHERE a.attrelid = rel AND a.attname = target_column;
    ELSIF task = 'multi' THEN
        fn := 'embed_multi';
    ELSE
        fn := 'embed';
    END IF;
END
$$;

-- embed.embed_trigger(model, source_column, target_column): keeps target_column equal to
-- embed(model, source_column) for inserted and updated rows.
--   row level:       BEFORE INSERT OR UPDATE ... FOR EACH ROW (one forward pass per row)
--   statement level: AFTER INSERT ... REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT,
--                    AFTER UPDATE ... REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
--                    FOR EACH STATEMENT (one batched call per statement; needs a primary key)
-- Rows whose source did not change keep their vector (unless it is NULL); a NULL source
-- gives a NULL vector.
-- Vectors pass through json_populate_record as text: extra_float_digits = 3 prints every
-- float4 so that it reads back as the same value, whatever the session's setting.
CREATE FUNCTION embed.embed_trigger() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET extra_float_digits = 3 AS $$
DECLARE
    model text;
    src text;
    tgt text;
    new_text text;
    old_text text;
    new_image bytea;
    old_image bytea;
    images boolean;
    target_null boolean;
    new_table name;
    old_table name;
    keys name[];
    changed text;
    any_changed boolean;
    writer record;
BEGIN
    IF TG_NARGS <> 3 THEN
        RAISE EXCEPTION 'embed.embed_trigger takes 3 arguments (model, source_column, target_column), trigger "%" gives %',
            TG_NAME, TG_NARGS
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'EXECUTE FUNCTION embed.embed_trigger(''minilm'', ''body'', ''embedding'')';
    END IF;
    model := TG_ARGV[0];
    src := TG_ARGV[1];
    tgt := TG_ARGV[2];
    IF TG_OP NOT IN ('INSERT', 'UPDATE') OR (TG_LEVEL = 'ROW') <> (TG_WHEN = 'BEFORE') THEN
        RAISE EXCEPTION 'trigger "%" on % fires % % FOR EACH %; embed.embed_trigger fires BEFORE INSERT OR UPDATE FOR EACH ROW, or AFTER INSERT / AFTER UPDATE FOR EACH STATEMENT',
            TG_NAME, TG_RELID::regclass, TG_WHEN, TG_OP, TG_LEVEL
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    PERFORM embed._check_target(TG_RELID, model, src, tgt);
    images := embed._source_kind(TG_RELID, src) = 'image';
    writer := embed._writer(TG_RELID, model, src, tgt);

    IF TG_LEVEL = 'ROW' AND images THEN
        EXECUTE format('SELECT ($1).%I, ($1).%I IS NULL', src, tgt) INTO new_image, target_null USING NEW;
        IF TG_OP = 'UPDATE' THEN
            EXECUTE format('SELECT ($1).%I', src) INTO old_image USING OLD;
            IF new_image IS NOT DISTINCT FROM old_image AND (new_image IS NULL OR NOT target_null) THEN
                RETURN NEW;
            END IF;
        END IF;
        IF new_image IS NULL THEN
            RETURN json_populate_record(NEW, json_build_object(tgt, NULL));
        END IF;
        RETURN json_populate_record(NEW, json_build_object(tgt, @extschema@.embed_image(model, new_image)));
    ELSIF TG_LEVEL = 'ROW' THEN
        EXECUTE format('SELECT ($1).%I::text, ($1).%I IS NULL', src, tgt) INTO new_text, target_null USING NEW;
        IF TG_OP = 'UPDATE' THEN
            EXECUTE format('SELECT ($1).%I::text', src) INTO old_text USING OLD;
            IF new_text IS NOT DISTINCT FROM old_text AND (new_text IS NULL OR NOT target_null) THEN
                RETURN NEW;
            END IF;
        END IF;
        IF new_text IS NULL THEN
            RETURN json_populate_record(NEW, json_build_object(tgt, NULL));
        END IF;
        IF writer.fn = 'embed_sparse' THEN
            -- The sparsevec text, which json_populate_record reads as the column's type.
            RETURN json_populate_record(NEW, json_build_object(tgt, @extschema@.embed_sparse(model, new_text)));
        ELSIF writer.fn = 'embed_multi' THEN
            -- A 2-D array: nested JSON arrays, which json_populate_record reads back as one.
            RETURN json_populate_record(NEW, json_build_object(tgt, @extschema@.embed_multi(model, new_text)));
        END IF;
        RETURN json_populate_record(NEW, json_build_object(tgt, @extschema@.embed(model, new_text)));
    END IF;

    -- Statement level: the changed rows of the transition tables, embedded in one call and
    -- written back by primary key.
    SELECT tgnewtable, tgoldtable INTO new_table, old_table
      FROM pg_trigger WHERE tgrelid = TG_RELID AND tgname = TG_NAME;
    IF new_table IS NULL OR (TG_OP = 'UPDATE' AND old_table IS NULL) THEN
        RAISE EXCEPTION 'statement-level trigger "%" on % needs its transition tables', TG_NAME, TG_RELID::regclass
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = CASE TG_OP WHEN 'INSERT'
                      THEN 'CREATE TRIGGER ... AFTER INSERT ON ... REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT ...'
                      ELSE 'CREATE TRIGGER ... AFTER UPDATE ON ... REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT ...' END;
    END IF;
    SELECT array_agg(a.attname ORDER BY k.ord) INTO keys
      FROM pg_index i
      CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = TG_RELID AND i.indisprimary;
    IF keys IS NULL THEN
        RAISE EXCEPTION 'statement-level embed.embed_trigger needs a primary key on %', TG_RELID::regclass
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Add a primary key, or use it as a row trigger (BEFORE INSERT OR UPDATE ... FOR EACH ROW).';
    END IF;
    IF TG_OP = 'INSERT' THEN
        changed := format('SELECT %s, n.%I%s AS "pg_embed source" FROM %I n WHERE n.%I IS NOT NULL OR n.%I IS NOT NULL',
            (SELECT string_agg(format('n.%I', k), ', ') FROM unnest(keys) k), src,
            CASE WHEN images THEN '' ELSE '::text' END, new_table, src, tgt);
    ELSE
        changed := format(
            'SELECT %s, n.%I%s AS "pg_embed source" FROM %I n LEFT JOIN %I o ON %s
              WHERE (o.%I IS NULL OR n.%I IS DISTINCT FROM o.%I OR (n.%I IS NULL AND n.%I IS NOT NULL))
                AND (n.%I IS NOT NULL OR n.%I IS NOT NULL)',
            (SELECT string_agg(format('n.%I', k), ', ') FROM unnest(keys) k), src,
            CASE WHEN images THEN '' ELSE '::text' END, new_table, old_table,
            (SELECT string_agg(format('o.%1$I = n.%1$I', k), ' AND ') FROM unnest(keys) k),
            keys[1], src, src, tgt, src, src, tgt);
    END IF;
    -- Without this check the UPDATE below would fire this trigger again, for ever.
    EXECUTE format('SELECT EXISTS (%s)', changed) INTO any_changed;
    IF NOT any_changed THEN
        RETURN NULL;
    END IF;
    EXECUTE format(
        'WITH c AS MATERIALIZED (SELECT s.*, row_number() OVER () AS "pg_embed ord" FROM (%s) s),
              v AS (SELECT e.vec, e.ord
                      FROM @extschema@.%s($1, ARRAY(SELECT "pg_embed source" FROM c ORDER BY "pg_embed ord"))
                           WITH ORDINALITY AS e(vec, ord))
         UPDATE %s t SET %I = v.vec%s FROM c JOIN v ON v.ord = c."pg_embed ord" WHERE %s',
        changed, writer.fn, TG_RELID::regclass, tgt, writer.cast_to,
        (SELECT string_agg(format('t.%1$I = c.%1$I', k), ' AND ') FROM unnest(keys) k))
        USING model;
    RETURN NULL;
END
$$;

-- One row per embed.backfill run: written by the run itself (committed with each batch),
-- so other sessions see its progress; embed.backfill_progress adds rate, ETA and state.
CREATE TABLE embed.backfill_runs (
    id            bigserial PRIMARY KEY,
    relation      text NOT NULL,
    -- regclass, not oid: a dump names the table, so a restore points at the new one.
    relid         regclass NOT NULL,
    source_column text NOT NULL,
    target_column text NOT NULL,
    model         text NOT NULL,
    batch_size    integer NOT NULL,
    pid           integer NOT NULL DEFAULT pg_catalog.pg_backend_pid(),
    started_by    name NOT NULL DEFAULT SESSION_USER,
    started_at    timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    finished_at   timestamptz,
    rows_total    bigint NOT NULL,
    rows_done     bigint NOT NULL DEFAULT 0,
    batches       integer NOT NULL DEFAULT 0
);
COMMENT ON TABLE embed.backfill_runs IS 'embed.backfill runs, as committed batch by batch; see embed.backfill_progress.';
REVOKE ALL ON embed.backfill_runs FROM PUBLIC;
GRANT SELECT ON embed.backfill_runs TO PUBLIC;
-- Backfill history and progress survive pg_dump.
SELECT pg_catalog.pg_extension_config_dump('embed.backfill_runs', '');
SELECT pg_catalog.pg_extension_config_dump('embed.backfill_runs_id_seq', '');

-- The run's own writes go through these (they only touch the caller's own run), so the
-- caller needs no privileges on embed.backfill_runs.
CREATE FUNCTION embed._backfill_start(rel regclass, source_column text, target_column text, model text,
                                      batch_size integer, rows_total bigint)
RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO embed.backfill_runs (relation, relid, source_column, target_column, model, batch_size, rows_total)
    VALUES (rel::text, rel, source_column, target_column, model, batch_size, rows_total)
    RETURNING id
$$;

CREATE FUNCTION embed._backfill_step(run bigint, rows_done bigint, finished boolean)
RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE embed.backfill_runs
       SET rows_done = _backfill_step.rows_done, batches = batches + 1, updated_at = clock_timestamp(),
           finished_at = CASE WHEN finished THEN clock_timestamp() END
     WHERE id = run AND pid = pg_backend_pid()
$$;

-- Progress of backfills, here and in other sessions: state is running, done, or
-- interrupted (its session ended, or its CALL was cancelled or failed, without finishing).
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

-- CALL embed.backfill(tbl, source_column, target_column, model, batch_size): fills the rows
-- of tbl whose target is NULL and source is not, batch_size rows per transaction (each
-- batch one embed(model, text[]) call and one UPDATE, then COMMIT), so a cancel or crash
-- loses at most one batch and running it again continues where it stopped. Reports
-- progress as NOTICEs and in embed.backfill_progress. Call it outside a transaction block.
CREATE PROCEDURE embed.backfill(tbl regclass, source_column text, target_column text, model text,
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

-- pg_embed.preload: models a session loads when it logs in, so its first query does not
-- pay for the load. A failure is a WARNING, never a refused login.
CREATE FUNCTION embed._preload_on_login() RETURNS event_trigger
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
-- Login event triggers exist from PostgreSQL 17 on: on 15 and 16 pg_embed.preload does not
-- act at login (call embed.preload() instead).
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 170000 THEN
        CREATE EVENT TRIGGER embed_preload ON login EXECUTE FUNCTION embed._preload_on_login();
    END IF;
END
$$;

-- CREATE TRIGGER ... EXECUTE FUNCTION embed.embed_trigger(model, source, target) on a source
-- column the model cannot embed (a bytea column for a model of text, a text column for a
-- model of images) is refused when the trigger is created, not at its first row.
CREATE FUNCTION embed._check_new_triggers() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t record;
    args text[];
BEGIN
    FOR t IN SELECT tr.tgrelid, tr.tgnargs, tr.tgargs
               FROM pg_event_trigger_ddl_commands() c
               JOIN pg_trigger tr ON tr.oid = c.objid
              WHERE c.classid = 'pg_trigger'::regclass AND tr.tgfoid = 'embed.embed_trigger'::regproc
    LOOP
        CONTINUE WHEN t.tgnargs <> 3;
        -- tgargs: each argument followed by a NUL byte (escape encoding shows it as \000 and
        -- doubles backslashes).
        SELECT array_agg(replace(a, '\\', '\') ORDER BY n) INTO args
          FROM unnest(string_to_array(encode(t.tgargs, 'escape'), '\000')) WITH ORDINALITY AS x(a, n)
         WHERE n <= 3;
        PERFORM embed._check_source(t.tgrelid, args[1], args[2]);
    END LOOP;
END
$$;
CREATE EVENT TRIGGER embed_check_trigger ON ddl_command_end WHEN TAG IN ('CREATE TRIGGER')
    EXECUTE FUNCTION embed._check_new_triggers();

-- The upgrade to 0.7.0 runs it (as the extension's owner); no other role needs it.
REVOKE EXECUTE ON FUNCTION embed._mark_changed_registrations() FROM PUBLIC;
