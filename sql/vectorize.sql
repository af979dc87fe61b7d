-- pg_embed asynchronous embedding: embed.vectorize installs a light statement trigger that
-- only records which rows changed (their primary key) in embed.vectorize_queue; background
-- workers (src/worker.rs) embed the queue in batches behind the writes, each batch one
-- embed(model, text[]) call, one UPDATE and one COMMIT, as the role that called
-- embed.vectorize. Rows that keep failing go to embed.vectorize_errors.
--
-- The contract: once writes commit and the queue drains, every row of a vectorized table
-- holds embed(model, source) of its current source (NULL for a NULL source), or has a row in
-- embed.vectorize_errors that says why. Keys are queued as text written (and read back)
-- under fixed settings, so no session's DateStyle, IntervalStyle, TimeZone,
-- extra_float_digits, bytea_output or lc_monetary changes them; DDL on a vectorized table is
-- followed (renames, types, partitions) or refused (dropping its columns or triggers) by the
-- event triggers at the end of this file.

-- One row per vectorized (table, target column).
CREATE TABLE embed.vectorizers (
    id serial PRIMARY KEY,
    tbl regclass NOT NULL,
    source_column text NOT NULL,
    target_column text NOT NULL,
    model text NOT NULL,
    batch_size integer NOT NULL CHECK (batch_size BETWEEN 1 AND 100000),
    -- The table's one-column primary key, and its type.
    key_column text NOT NULL,
    key_type regtype NOT NULL,
    -- The role the workers read and write the table as.
    owner regrole NOT NULL,
    created timestamptz NOT NULL DEFAULT now(),
    -- Kept by the workers: rows embedded, and the last batch.
    rows_done bigint NOT NULL DEFAULT 0,
    last_batch_at timestamptz,
    last_batch_rows integer,
    last_batch_seconds double precision,
    -- Set while the whole vectorizer waits (its model is not registered): no batch before.
    paused_until timestamptz,
    -- The key, source and target columns by number, so that a rename is followed.
    key_attnum smallint NOT NULL,
    source_attnum smallint NOT NULL,
    target_attnum smallint NOT NULL,
    UNIQUE (tbl, target_column)
);
COMMENT ON TABLE embed.vectorizers IS 'tables kept embedded by pg_embed''s background workers; see embed.vectorize.';

-- Changed rows waiting to be embedded: one row per change (a key changed twice while queued
-- is embedded once, from its newest text).
CREATE TABLE embed.vectorize_queue (
    id bigserial PRIMARY KEY,
    vectorizer integer NOT NULL REFERENCES embed.vectorizers ON DELETE CASCADE,
    key text NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Backoff of a row that failed: not retried before.
    not_before timestamptz
);
CREATE INDEX vectorize_queue_vectorizer ON embed.vectorize_queue (vectorizer, id);

-- Rows the workers could not embed (key NULL: the whole vectorizer, e.g. its model is not
-- registered). A row is retried with backoff and leaves the queue after 3 attempts; its
-- error stays until it is embedded (it is queued again when it changes).
CREATE TABLE embed.vectorize_errors (
    vectorizer integer NOT NULL REFERENCES embed.vectorizers ON DELETE CASCADE,
    tbl regclass NOT NULL,
    key text,
    model text NOT NULL,
    sqlstate text NOT NULL,
    message text NOT NULL,
    attempts integer NOT NULL DEFAULT 1,
    last_try timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX vectorize_errors_key ON embed.vectorize_errors (vectorizer, coalesce(key, ''));

-- The queue and the errors hold other tables' keys and messages: superusers and embed_admin
-- read them; every role sees the counts in embed.vectorize_status.
GRANT SELECT ON embed.vectorizers, embed.vectorize_queue, embed.vectorize_errors TO embed_admin;

-- What the workers are told to do and have still to do is user data: pg_dump keeps the
-- vectorizers, their queue and their errors (with the sequences, so restored ids go on).
SELECT pg_catalog.pg_extension_config_dump('embed.vectorizers', '');
SELECT pg_catalog.pg_extension_config_dump('embed.vectorizers_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('embed.vectorize_queue', '');
SELECT pg_catalog.pg_extension_config_dump('embed.vectorize_queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('embed.vectorize_errors', '');

-- Refuses (42501) to `what` (vectorize, unvectorize) `rel` unless the calling role (SET ROLE
-- included) owns it, is a member of embed_admin, or is a superuser.
CREATE FUNCTION embed._may_vectorize(rel regclass, what text)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    caller regrole := embed._outer_role();
BEGIN
    IF NOT (pg_has_role(caller, (SELECT relowner FROM pg_class WHERE oid = rel), 'USAGE')
            OR pg_has_role(caller, 'embed_admin', 'USAGE') OR (SELECT rolsuper FROM pg_roles WHERE oid = caller)) THEN
        RAISE EXCEPTION 'permission denied to % %', what, rel
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'The table''s owner, members of embed_admin and superusers may.';
    END IF;
END
$$;

-- The vectorizer of `target_column` of `rel`, or an error (42704) saying it has none.
CREATE FUNCTION embed._vectorizer(rel regclass, target_column text)
RETURNS embed.vectorizers LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v embed.vectorizers;
BEGIN
    SELECT * INTO v FROM embed.vectorizers z WHERE z.tbl = rel AND z.target_column = _vectorizer.target_column;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of % is not vectorized', target_column, rel
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN v;
END
$$;

-- The text of keys in the queue: what key::text gives under these settings, which every
-- function that writes or reads queued keys sets (as its SET clauses) whatever the session
-- has: the enqueue function of a key type whose text depends on them (embed._vectorize_
-- enqueue_source), embed.vectorize, embed._vectorize_sync, embed._keys and the DDL trigger.
--   SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
--   SET extra_float_digits = 3 SET bytea_output = 'hex' SET lc_monetary = 'C'

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

-- A vectorized table and every partition of it, at any depth.
CREATE FUNCTION embed._vectorized_tables(rel regclass)
RETURNS SETOF regclass LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT rel UNION SELECT p.relid FROM pg_partition_tree(rel) p
$$;

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
CREATE FUNCTION embed.vectorize(tbl regclass, source_column text, target_column text, model text,
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
CREATE FUNCTION embed.unvectorize(tbl regclass, target_column text)
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

-- Records a failure: of one key (with backoff: the key's queued rows wait 2^attempts
-- seconds, and leave the queue after the third attempt), or of the whole vectorizer (key
-- NULL: paused for 5 seconds).
CREATE FUNCTION embed._vectorize_failed(v embed.vectorizers, failed_key text, ids bigint[], state text, msg text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tries integer;
BEGIN
    INSERT INTO embed.vectorize_errors AS e (vectorizer, tbl, key, model, sqlstate, message)
    VALUES (v.id, v.tbl, failed_key, v.model, state, msg)
    ON CONFLICT (vectorizer, coalesce(key, '')) DO UPDATE
       SET attempts = e.attempts + 1, sqlstate = EXCLUDED.sqlstate, message = EXCLUDED.message,
           model = EXCLUDED.model, last_try = now()
    RETURNING attempts INTO tries;
    IF failed_key IS NULL THEN
        UPDATE embed.vectorizers SET paused_until = now() + interval '5 seconds' WHERE id = v.id;
    ELSIF tries >= 3 THEN
        DELETE FROM embed.vectorize_queue WHERE id = ANY (ids) AND key = failed_key;
    ELSE
        UPDATE embed.vectorize_queue SET not_before = now() + make_interval(secs => 2 ^ tries)
         WHERE id = ANY (ids) AND key = failed_key;
    END IF;
END
$$;

-- Embeds the rows of `keys` (as the vectorizer's owner) and writes their vectors; a failing
-- set is split in halves until the failing keys are found and recorded. Returns the rows
-- written.
CREATE FUNCTION embed._vectorize_keys(v embed.vectorizers, keys text[], ids bigint[])
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

-- One batch of the vectorizer whose oldest ready row has waited longest: claims up to
-- batch_size queued rows (FOR UPDATE SKIP LOCKED; a key another worker holds is left to
-- it), embeds their keys' current source in one call, writes the vectors and deletes the
-- claimed rows. Returns the rows claimed (0: nothing to do). The caller commits.
CREATE FUNCTION embed._vectorize_step() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v embed.vectorizers;
    ids bigint[];
    keys text[];
    n integer;
    started timestamptz := clock_timestamp();
    state text;
    msg text;
BEGIN
    SELECT z.* INTO v
      FROM embed.vectorizers z
      CROSS JOIN LATERAL (SELECT min(q.id) AS first FROM embed.vectorize_queue q
                           WHERE q.vectorizer = z.id AND (q.not_before IS NULL OR q.not_before <= now())) f
     WHERE f.first IS NOT NULL AND (z.paused_until IS NULL OR z.paused_until <= now())
     ORDER BY f.first LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT array_agg(c.id ORDER BY c.id), array_agg(DISTINCT c.key) INTO ids, keys
      FROM (SELECT q.id, q.key FROM embed.vectorize_queue q
             WHERE q.vectorizer = v.id AND (q.not_before IS NULL OR q.not_before <= now())
               AND pg_try_advisory_xact_lock(1701667942, hashtext(v.id || ':' || q.key))
             ORDER BY q.id LIMIT v.batch_size
               FOR UPDATE SKIP LOCKED) c;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    -- The model first: if it is gone, the whole vectorizer waits (its rows stay queued).
    BEGIN
        PERFORM embed.model_info(v.model);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
        PERFORM embed._vectorize_failed(v, NULL, ids, state, msg);
        RETURN 0;
    END;
    DELETE FROM embed.vectorize_errors e WHERE e.vectorizer = v.id AND e.key IS NULL;
    n := embed._vectorize_keys(v, keys, ids);
    -- Claimed rows of keys that failed stay queued with a backoff (or were removed).
    DELETE FROM embed.vectorize_queue q WHERE q.id = ANY (ids)
       AND NOT EXISTS (SELECT FROM embed.vectorize_errors e WHERE e.vectorizer = v.id AND e.key = q.key
                         AND e.last_try = now());
    UPDATE embed.vectorizers
       SET rows_done = rows_done + n, last_batch_at = clock_timestamp(), last_batch_rows = n,
           last_batch_seconds = extract(epoch FROM clock_timestamp() - started)
     WHERE id = v.id;
    RETURN array_length(ids, 1);
END
$$;

-- Per vectorized column: rows queued, the last batch's rows/s, the oldest queued row's age,
-- errors, and the database's workers.
CREATE VIEW embed.vectorize_status AS
SELECT v.tbl, v.target_column, v.model,
       (SELECT count(*) FROM embed.vectorize_queue q WHERE q.vectorizer = v.id) AS queued,
       v.rows_done,
       v.last_batch_rows / nullif(v.last_batch_seconds, 0) AS rows_per_second,
       clock_timestamp() - (SELECT min(q.enqueued_at) FROM embed.vectorize_queue q WHERE q.vectorizer = v.id) AS lag,
       (SELECT count(*) FROM embed.vectorize_errors e WHERE e.vectorizer = v.id) AS errors,
       w.pids AS worker_pids, w.states AS worker_states,
       v.last_batch_at, v.paused_until
  FROM embed.vectorizers v
  CROSS JOIN LATERAL (
      SELECT array_agg(a.pid ORDER BY a.pid) AS pids, array_agg(coalesce(a.wait_event, a.state, 'running') ORDER BY a.pid) AS states
        FROM pg_stat_activity a
       WHERE a.backend_type = 'pg_embed vectorize' AND a.datname = current_database()) w;
GRANT SELECT ON embed.vectorize_status TO PUBLIC;

-- embed.vectorize_wait(tbl, target_column, timeout): waits until no row of that vectorizer
-- is queued (embedded, or failed three times); true, or false at the timeout.
CREATE FUNCTION embed.vectorize_wait(tbl regclass, target_column text, timeout interval DEFAULT '1 minute')
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

CREATE EVENT TRIGGER pg_embed_vectorize_ddl ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE', 'CREATE TABLE')
    EXECUTE FUNCTION embed._vectorize_ddl();
CREATE EVENT TRIGGER pg_embed_vectorize_drop ON sql_drop
    EXECUTE FUNCTION embed._vectorize_drop();
