-- Every object of the extension pg_embed in this database, one line each, described by
-- name and definition (never by oid), sorted: two databases whose outputs are equal have
-- the same extension objects. tests/ops/upgrade.sh compares a database upgraded from 0.1.0
-- with a fresh install this way. (pg_dump cannot: it dumps an extension as CREATE EXTENSION.)
WITH ext AS (
    SELECT oid, extversion, extconfig, extcondition FROM pg_extension WHERE extname = 'pg_embed'
), member AS (
    SELECT d.classid, d.objid
      FROM pg_depend d, ext
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
), line AS (
    -- every member, by its description
    SELECT pg_describe_object(m.classid, m.objid, 0) AS what, 'member' AS aspect, '' AS definition
      FROM member m
    UNION ALL
    -- functions and procedures: the whole CREATE statement (body, volatility, SET, security)
    SELECT p.oid::regprocedure::text, 'definition', pg_get_functiondef(p.oid)
      FROM member m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
    UNION ALL
    SELECT p.oid::regprocedure::text, 'owner acl', format('%s %s', pg_get_userbyid(p.proowner), p.proacl)
      FROM member m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
    UNION ALL
    -- relations: kind, owner, privileges, options
    SELECT c.oid::regclass::text, 'relation',
           format('%s %s %s %s %s %s', c.relkind, pg_get_userbyid(c.relowner), c.relacl, c.reloptions,
                  c.relpersistence, c.relrowsecurity)
      FROM member m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
    UNION ALL
    -- columns in order: type, NOT NULL, default, identity, generated, privileges
    SELECT c.oid::regclass::text, 'column ' || lpad(a.attnum::text, 3, '0'),
           format('%s %s %s %s %s%s %s %s', a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  pg_get_expr(ad.adbin, ad.adrelid), a.attidentity, a.attgenerated, a.attacl,
                  col_description(c.oid, a.attnum))
      FROM member m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
    UNION ALL
    SELECT con.conrelid::regclass::text, 'constraint ' || con.conname, pg_get_constraintdef(con.oid)
      FROM member m JOIN pg_constraint con ON m.classid = 'pg_class'::regclass AND con.conrelid = m.objid
    UNION ALL
    SELECT i.indrelid::regclass::text, 'index', pg_get_indexdef(i.indexrelid)
      FROM member m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
    UNION ALL
    SELECT t.tgrelid::regclass::text, 'trigger ' || t.tgname, pg_get_triggerdef(t.oid)
      FROM member m JOIN pg_trigger t ON m.classid = 'pg_class'::regclass AND t.tgrelid = m.objid
     WHERE NOT t.tgisinternal
    UNION ALL
    SELECT c.oid::regclass::text, 'view', pg_get_viewdef(c.oid)
      FROM member m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid AND c.relkind IN ('v', 'm')
    UNION ALL
    SELECT s.seqrelid::regclass::text, 'sequence',
           format('%s %s %s %s %s %s %s', format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmax,
                  s.seqmin, s.seqcache, s.seqcycle)
      FROM member m JOIN pg_sequence s ON m.classid = 'pg_class'::regclass AND s.seqrelid = m.objid
    UNION ALL
    SELECT n.nspname, 'schema', format('%s %s', pg_get_userbyid(n.nspowner), n.nspacl)
      FROM member m JOIN pg_namespace n ON m.classid = 'pg_namespace'::regclass AND n.oid = m.objid
    UNION ALL
    SELECT e.evtname, 'event trigger', format('%s %s %s %s', e.evtevent, e.evtfoid::regprocedure, e.evtenabled, e.evttags)
      FROM member m JOIN pg_event_trigger e ON m.classid = 'pg_event_trigger'::regclass AND e.oid = m.objid
    UNION ALL
    -- comments on any member (tables, functions, ...)
    SELECT pg_describe_object(m.classid, m.objid, 0), 'comment', d.description
      FROM member m JOIN pg_description d ON d.classoid = m.classid AND d.objoid = m.objid AND d.objsubid = 0
    UNION ALL
    -- the privileges pg_dump takes as the extension's own (so it dumps only later changes)
    SELECT pg_describe_object(ip.classoid, ip.objoid, ip.objsubid), 'initial privileges', ip.initprivs::text
      FROM member m JOIN pg_init_privs ip ON ip.classoid = m.classid AND ip.objoid = m.objid
    UNION ALL
    -- the tables pg_dump dumps as configuration, with their filters
    SELECT cfg.relid::regclass::text, 'configuration dump', coalesce(cfg.cond, '')
      FROM ext CROSS JOIN LATERAL unnest(ext.extconfig, ext.extcondition) AS cfg(relid, cond)
    UNION ALL
    SELECT 'pg_embed', 'version', extversion FROM ext
)
SELECT what || ' | ' || aspect || ' | ' || definition FROM line ORDER BY what, aspect, definition;
