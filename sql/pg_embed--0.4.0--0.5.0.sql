-- pg_embed 0.4.0 -> 0.5.0. Run by ALTER EXTENSION pg_embed UPDATE; tests/ops/upgrade.sh checks
-- that a database upgraded with it has exactly the objects of a fresh 0.5.0 install.
\echo Use "ALTER EXTENSION pg_embed UPDATE TO '0.5.0'" to load this file. \quit

-- 0.5.0: late interaction in the write paths: a model of task 'multi' (ColBERT, or bge-m3
-- registered with "task": "multi") fills a real[] column with embed_multi's 2-D arrays;
-- the row trigger prints vectors with extra_float_digits = 3 whatever the session's setting.
CREATE OR REPLACE FUNCTION embed._check_target(rel regclass, model text, source_column text, target_column text)
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

CREATE OR REPLACE FUNCTION embed._writer(rel regclass, model text, source_column text, target_column text,
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

CREATE OR REPLACE FUNCTION embed.embed_trigger() RETURNS trigger
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

-- 0.5.0: embed.maxsim (late interaction): the exact MaxSim score of two 2-D real[], and of
-- two arrays of pgvector's vector (anyarray, the element type checked at run time, so that
-- pg_embed does not depend on pgvector).
CREATE FUNCTION embed."maxsim"(
	"query" real[], /* RealArray */
	"document" real[] /* RealArray */
) RETURNS real /* f32 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'maxsim_wrapper';

CREATE FUNCTION embed."maxsim"(
	"query" anyarray, /* AnyArray */
	"document" anyarray /* AnyArray */
) RETURNS real /* f32 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'maxsim_vectors_wrapper';

-- 0.5.0: late interaction: embed_multi (a ColBERT model's or bge-m3's token vectors as a 2-D
-- real[]) and embed.encode_all (bge-m3's dense, lexical and token outputs from one pass), as
-- `cargo pgrx schema` generates them.
-- pg_embed::sql::embed_multi
CREATE  FUNCTION "embed_multi"(
	"model" TEXT, /* & str */
	"input" TEXT /* & str */
) RETURNS real[] /* crate :: late :: Matrix */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'embed_multi_wrapper';

-- pg_embed::sql::embed_multi
CREATE  FUNCTION "embed_multi"(
	"model" TEXT, /* & str */
	"input" TEXT, /* & str */
	"prompt_name" TEXT /* & str */
) RETURNS real[] /* crate :: late :: Matrix */
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'embed_multi_with_prompt_wrapper';

-- pg_embed::sql::embed_multi
CREATE  FUNCTION "embed_multi"(
	"model" TEXT, /* & str */
	"inputs" TEXT[] /* pgrx :: Array < & str > */
) RETURNS SETOF real[] /* Option < crate :: late :: Matrix > */
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'embed_multi_array_wrapper';

-- pg_embed::sql::embed::encode_all
CREATE  FUNCTION embed."encode_all"(
	"model" TEXT, /* & str */
	"input" TEXT /* & str */
) RETURNS TABLE (
	"dense" real[],  /* Vec < f32 > */
	"sparse" TEXT,  /* String */
	"multi" real[]  /* crate :: late :: Matrix */
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'encode_all_wrapper';
