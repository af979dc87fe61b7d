/*
 * Server-wide statistics of pg_embed's model calls (embed.stat_models), kept where the
 * PostgreSQL release allows. The Rust side (src/stats.rs) measures each call and hands its
 * counts here; this file is C because it uses PostgreSQL's internal statistics headers,
 * whose structures (bit fields, inline functions) are not in pgrx's bindings.
 *
 * Three scopes, chosen once in _PG_init:
 *   PGEMBED_SCOPE_SERVER_PGSTAT (PostgreSQL 18, preloaded): a custom cumulative statistics
 *     kind. Counts are pending in each backend and flushed as PostgreSQL flushes its own
 *     (when the session goes idle, at most once a second, and when it ends); they are
 *     written to pg_stat/ at a clean shutdown and discarded after a crash.
 *   PGEMBED_SCOPE_SERVER_SHMEM (PostgreSQL 15-17, preloaded): a table in shared memory
 *     under one LWLock, updated at the end of each call; written to pg_stat/ when the
 *     postmaster stops cleanly, read back and removed at the next start (so a crash, which
 *     skips the write, resets them), as pg_stat_statements does.
 *   PGEMBED_SCOPE_BACKEND (not preloaded): this backend's own counts, since it started.
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#if PG_VERSION_NUM >= 180000
#include "utils/pgstat_internal.h"
#endif

#define PGEMBED_SCOPE_BACKEND 0
#define PGEMBED_SCOPE_SERVER_PGSTAT 1
#define PGEMBED_SCOPE_SERVER_SHMEM 2

#define PGEMBED_NAME_LEN 64
#define PGEMBED_SOURCE_LEN 256

/* Counts of one (database, model, source); the Rust mirror is stats::Counters. */
typedef struct PgEmbedCounters
{
	int64		calls;
	int64		inputs;
	int64		tokens;
	int64		truncated;
	int64		chunked;
	int64		errors;
	int64		cancels;
	int64		forward_passes;
	int64		loads;
	int64		shared_bytes;	/* latest load's, not summed */
	int64		worker_calls;
	int64		worker_inputs;
	int64		worker_tokens;
	double		total_ms;
	double		max_ms;
	double		load_ms;
	double		worker_ms;
	TimestampTz last_call;
} PgEmbedCounters;

/* A row's data; the Rust mirror is stats::Entry. */
typedef struct PgEmbedEntry
{
	char		name[PGEMBED_NAME_LEN];
	char		source[PGEMBED_SOURCE_LEN];
	PgEmbedCounters c;
	TimestampTz stats_reset;
} PgEmbedEntry;

/* A row of pg_embed_stat_collect; the Rust mirror is stats::Row. */
typedef struct PgEmbedRow
{
	Oid			dboid;
	PgEmbedEntry e;
} PgEmbedRow;

/* The Rust mirrors assert the same sizes. */
StaticAssertDecl(sizeof(PgEmbedCounters) == 18 * 8, "PgEmbedCounters: 18 fields of 8 bytes");
StaticAssertDecl(sizeof(PgEmbedEntry) == PGEMBED_NAME_LEN + PGEMBED_SOURCE_LEN + 19 * 8, "PgEmbedEntry layout");
StaticAssertDecl(sizeof(PgEmbedRow) == 8 + sizeof(PgEmbedEntry), "PgEmbedRow layout");

static int	scope = PGEMBED_SCOPE_BACKEND;

static void
counters_add(PgEmbedCounters *to, const PgEmbedCounters *d)
{
	to->calls += d->calls;
	to->inputs += d->inputs;
	to->tokens += d->tokens;
	to->truncated += d->truncated;
	to->chunked += d->chunked;
	to->errors += d->errors;
	to->cancels += d->cancels;
	to->forward_passes += d->forward_passes;
	to->loads += d->loads;
	if (d->loads > 0)
		to->shared_bytes = d->shared_bytes;
	to->worker_calls += d->worker_calls;
	to->worker_inputs += d->worker_inputs;
	to->worker_tokens += d->worker_tokens;
	to->total_ms += d->total_ms;
	to->max_ms = Max(to->max_ms, d->max_ms);
	to->load_ms += d->load_ms;
	to->worker_ms += d->worker_ms;
	to->last_call = Max(to->last_call, d->last_call);
}

static void
entry_name(PgEmbedEntry *e, const char *name, const char *source)
{
	strlcpy(e->name, name, sizeof(e->name));
	strlcpy(e->source, source, sizeof(e->source));
}

/* ---- this backend's own counts (not preloaded) ---------------------------------------- */

static PgEmbedRow *local_rows = NULL;
static int	local_count = 0;
static int	local_capacity = 0;

/*
 * The row of (dboid, name, source) among rows[0..*count), or a new one at rows[*count] when
 * there is room (count < capacity); NULL when there is none.
 */
static PgEmbedRow *
row_of(PgEmbedRow *rows, int *count, int capacity, Oid dboid, const char *name, const char *source)
{
	PgEmbedRow *r;

	for (int i = 0; i < *count; i++)
	{
		r = &rows[i];
		if (r->dboid == dboid && strncmp(r->e.name, name, PGEMBED_NAME_LEN - 1) == 0
			&& strncmp(r->e.source, source, PGEMBED_SOURCE_LEN - 1) == 0)
			return r;
	}
	if (*count >= capacity)
		return NULL;
	r = &rows[(*count)++];
	memset(r, 0, sizeof(PgEmbedRow));
	r->dboid = dboid;
	entry_name(&r->e, name, source);
	return r;
}

static void
local_add(Oid dboid, const char *name, const char *source, const PgEmbedCounters *d)
{
	PgEmbedRow *row = row_of(local_rows, &local_count, local_capacity, dboid, name, source);

	if (row == NULL)
	{
		/* A new row and no room: the array grows. */
		int			grown = Max(8, local_capacity * 2);

		local_rows = local_rows
			? repalloc(local_rows, sizeof(PgEmbedRow) * grown)
			: MemoryContextAlloc(TopMemoryContext, sizeof(PgEmbedRow) * grown);
		local_capacity = grown;
		row = row_of(local_rows, &local_count, local_capacity, dboid, name, source);
	}
	counters_add(&row->e.c, d);
}

/* ---- PostgreSQL 15-17: a shared-memory table --------------------------------------------- */

#define PGEMBED_SHMEM_ROWS 1024
#define PGEMBED_FILE_MAGIC 0x70676531	/* "pge1" */
#define PGEMBED_FILE PGSTAT_STAT_PERMANENT_DIRECTORY "/pg_embed.stat"

typedef struct PgEmbedShared
{
	LWLock	   *lock;
	int			count;
	int64		overflow;		/* calls not counted: the table was full */
	PgEmbedRow	rows[PGEMBED_SHMEM_ROWS];
} PgEmbedShared;

static PgEmbedShared *shared = NULL;

#if PG_VERSION_NUM < 180000
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(PgEmbedShared)));
	RequestNamedLWLockTranche("pg_embed_stats", 1);
}

static void
shmem_save(int code, Datum arg)
{
	FILE	   *file;
	bool		ok;

	/* Only a clean shutdown keeps the counts; a crash resets them. */
	if (code != 0 || shared == NULL)
		return;
	file = AllocateFile(PGEMBED_FILE ".tmp", PG_BINARY_W);
	if (file == NULL)
		goto fail;
	ok = fwrite(&(uint32){PGEMBED_FILE_MAGIC}, sizeof(uint32), 1, file) == 1
		&& fwrite(&shared->count, sizeof(int), 1, file) == 1
		&& (shared->count == 0
			|| fwrite(shared->rows, sizeof(PgEmbedRow), shared->count, file) == (size_t) shared->count);
	if (FreeFile(file) || !ok)
		goto fail;
	(void) durable_rename(PGEMBED_FILE ".tmp", PGEMBED_FILE, LOG);
	return;
fail:
	ereport(LOG, (errcode_for_file_access(),
				  errmsg("pg_embed: could not write statistics file \"%s\": %m", PGEMBED_FILE ".tmp")));
	unlink(PGEMBED_FILE ".tmp");
}

static void
shmem_load(void)
{
	FILE	   *file = AllocateFile(PGEMBED_FILE, PG_BINARY_R);
	uint32		magic;
	int			count;

	if (file == NULL)
		return;
	if (fread(&magic, sizeof(uint32), 1, file) == 1 && magic == PGEMBED_FILE_MAGIC
		&& fread(&count, sizeof(int), 1, file) == 1 && count >= 0 && count <= PGEMBED_SHMEM_ROWS
		&& (count == 0 || fread(shared->rows, sizeof(PgEmbedRow), count, file) == (size_t) count))
		shared->count = count;
	else
		ereport(LOG, (errmsg("pg_embed: ignored the damaged statistics file \"%s\"", PGEMBED_FILE)));
	FreeFile(file);
	/* Read once: a crash before the next clean shutdown starts from zero. */
	unlink(PGEMBED_FILE);
}

static void
shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("pg_embed_stats", sizeof(PgEmbedShared), &found);
	if (!found)
	{
		memset(shared, 0, sizeof(PgEmbedShared));
		shared->lock = &(GetNamedLWLockTranche("pg_embed_stats"))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
	if (!IsUnderPostmaster)
	{
		on_shmem_exit(shmem_save, (Datum) 0);
		if (!found)
			shmem_load();
	}
}
#endif

static void
shmem_add(Oid dboid, const char *name, const char *source, const PgEmbedCounters *d)
{
	PgEmbedRow *row;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	row = row_of(shared->rows, &shared->count, PGEMBED_SHMEM_ROWS, dboid, name, source);
	if (row != NULL)
		counters_add(&row->e.c, d);
	else
		shared->overflow += d->calls;
	LWLockRelease(shared->lock);
}

/* ---- PostgreSQL 18: a custom cumulative statistics kind ------------------------------------ */

#if PG_VERSION_NUM >= 180000

/* pg_embed's statistics kind: one of the IDs PostgreSQL leaves to extensions (24-32). */
#define PGEMBED_PGSTAT_KIND 27

static uint64
entry_key(const char *name, const char *source)
{
	uint64		h = hash_bytes_extended((const unsigned char *) name, strlen(name), 0);

	return hash_bytes_extended((const unsigned char *) source, strlen(source), h);
}

typedef struct PgEmbedSharedEntry
{
	PgStatShared_Common header;
	PgEmbedEntry e;
} PgEmbedSharedEntry;

static bool
pgstat_flush(PgStat_EntryRef *ref, bool nowait)
{
	PgEmbedEntry *pending = (PgEmbedEntry *) ref->pending;
	PgEmbedSharedEntry *sh = (PgEmbedSharedEntry *) ref->shared_stats;

	if (!pgstat_lock_entry(ref, nowait))
		return false;
	/* A new entry, or one pg_stat_reset() cleared: it takes the model's name again. */
	if (sh->e.name[0] == '\0')
		entry_name(&sh->e, pending->name, pending->source);
	counters_add(&sh->e.c, &pending->c);
	pgstat_unlock_entry(ref);
	return true;
}

static void
pgstat_reset_time(PgStatShared_Common *header, TimestampTz ts)
{
	((PgEmbedSharedEntry *) header)->e.stats_reset = ts;
}

static const PgStat_KindInfo pgembed_kind = {
	.name = "pg_embed",
	.fixed_amount = false,
	/* embed.stat_models shows every database's rows */
	.accessed_across_databases = true,
	.write_to_file = true,
	.shared_size = sizeof(PgEmbedSharedEntry),
	.shared_data_off = offsetof(PgEmbedSharedEntry, e),
	.shared_data_len = sizeof(PgEmbedEntry),
	.pending_size = sizeof(PgEmbedEntry),
	.flush_pending_cb = pgstat_flush,
	.reset_timestamp_cb = pgstat_reset_time,
};

static void
pgstat_add(Oid dboid, const char *name, const char *source, const PgEmbedCounters *d)
{
	PgStat_EntryRef *ref = pgstat_prep_pending_entry(PGEMBED_PGSTAT_KIND, dboid,
													 entry_key(name, source), NULL);
	PgEmbedEntry *pending = (PgEmbedEntry *) ref->pending;

	if (pending->name[0] == '\0')
		entry_name(pending, name, source);
	counters_add(&pending->c, d);
}

/* The keys of every live entry of the kind, into *keys (palloc'd); returns how many. */
static int
pgstat_keys(PgStat_HashKey **keys)
{
	dshash_seq_status hstat;
	PgStatShared_HashEntry *p;
	int			n = 0,
				cap = 16;

	*keys = palloc(sizeof(PgStat_HashKey) * cap);
	dshash_seq_init(&hstat, pgStatLocal.shared_hash, false);
	while ((p = dshash_seq_next(&hstat)) != NULL)
	{
		if (p->key.kind != PGEMBED_PGSTAT_KIND || p->dropped)
			continue;
		if (n == cap)
		{
			cap *= 2;
			*keys = repalloc(*keys, sizeof(PgStat_HashKey) * cap);
		}
		(*keys)[n++] = p->key;
	}
	dshash_seq_term(&hstat);
	return n;
}

#endif

/* ---- the interface src/stats.rs calls ------------------------------------------------------- */

/* Called from _PG_init: chooses the scope and, when preloaded, sets it up. */
void
pg_embed_stat_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
#if PG_VERSION_NUM >= 180000
	pgstat_register_kind(PGEMBED_PGSTAT_KIND, &pgembed_kind);
	scope = PGEMBED_SCOPE_SERVER_PGSTAT;
#else
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
	scope = PGEMBED_SCOPE_SERVER_SHMEM;
#endif
}

int
pg_embed_stat_scope(void)
{
	return scope;
}

/* Adds one call's (or load's) counts to the row of (database, model, source). */
void
pg_embed_stat_add(Oid dboid, const char *name, const char *source, const PgEmbedCounters *d)
{
	switch (scope)
	{
#if PG_VERSION_NUM >= 180000
		case PGEMBED_SCOPE_SERVER_PGSTAT:
			pgstat_add(dboid, name, source, d);
			break;
#endif
		case PGEMBED_SCOPE_SERVER_SHMEM:
			if (shared != NULL)
				shmem_add(dboid, name, source, d);
			break;
		default:
			local_add(dboid, name, source, d);
	}
}

/*
 * Every row, into *rows (palloc'd in the current memory context); returns how many. On
 * PostgreSQL 18 each row is read as pg_stat_* views read theirs (stats_fetch_consistency).
 */
int
pg_embed_stat_collect(PgEmbedRow **rows)
{
	int			n = 0;

	switch (scope)
	{
#if PG_VERSION_NUM >= 180000
		case PGEMBED_SCOPE_SERVER_PGSTAT:
			{
				PgStat_HashKey *keys;
				int			count = pgstat_keys(&keys);

				*rows = palloc0(sizeof(PgEmbedRow) * Max(count, 1));
				for (int i = 0; i < count; i++)
				{
					PgEmbedEntry *e = pgstat_fetch_entry(PGEMBED_PGSTAT_KIND, keys[i].dboid, keys[i].objid);

					/* Gone since, or cleared by pg_stat_reset() and not called since. */
					if (e == NULL || e->name[0] == '\0')
						continue;
					(*rows)[n].dboid = keys[i].dboid;
					(*rows)[n].e = *e;
					n++;
				}
				return n;
			}
#endif
		case PGEMBED_SCOPE_SERVER_SHMEM:
			if (shared == NULL)
				break;
			LWLockAcquire(shared->lock, LW_SHARED);
			n = shared->count;
			*rows = palloc(sizeof(PgEmbedRow) * Max(n, 1));
			memcpy(*rows, shared->rows, sizeof(PgEmbedRow) * n);
			LWLockRelease(shared->lock);
			return n;
		default:
			*rows = palloc(sizeof(PgEmbedRow) * Max(local_count, 1));
			memcpy(*rows, local_rows, sizeof(PgEmbedRow) * local_count);
			return local_count;
	}
	*rows = palloc(sizeof(PgEmbedRow));
	return 0;
}

/* Whether the row of database `db` with entry `e` is one that a reset of (dboid, name) clears. */
static bool
reset_matches(Oid db, const PgEmbedEntry *e, Oid dboid, const char *name)
{
	return db == dboid && (name == NULL || strncmp(e->name, name, PGEMBED_NAME_LEN - 1) == 0);
}

static void
reset_entry(PgEmbedEntry *e, TimestampTz now)
{
	memset(&e->c, 0, sizeof(PgEmbedCounters));
	e->stats_reset = now;
}

/*
 * Zeroes the counts of database dboid's rows of model `name` (every model when NULL),
 * keeping the rows and stamping stats_reset; returns how many rows it reset.
 */
int
pg_embed_stat_reset(Oid dboid, const char *name)
{
	TimestampTz now = GetCurrentTimestamp();
	int			n = 0;

	switch (scope)
	{
#if PG_VERSION_NUM >= 180000
		case PGEMBED_SCOPE_SERVER_PGSTAT:
			{
				PgStat_HashKey *keys;
				int			count = pgstat_keys(&keys);

				for (int i = 0; i < count; i++)
				{
					PgStat_EntryRef *ref;
					PgEmbedEntry *e;

					if (keys[i].dboid != dboid)
						continue;
					ref = pgstat_get_entry_ref_locked(PGEMBED_PGSTAT_KIND, keys[i].dboid, keys[i].objid, false);
					if (ref == NULL)
						continue;
					e = &((PgEmbedSharedEntry *) ref->shared_stats)->e;
					if (reset_matches(keys[i].dboid, e, dboid, name))
					{
						reset_entry(e, now);
						n++;
					}
					pgstat_unlock_entry(ref);
				}
				break;
			}
#endif
		case PGEMBED_SCOPE_SERVER_SHMEM:
			if (shared == NULL)
				break;
			LWLockAcquire(shared->lock, LW_EXCLUSIVE);
			for (int i = 0; i < shared->count; i++)
				if (reset_matches(shared->rows[i].dboid, &shared->rows[i].e, dboid, name))
				{
					reset_entry(&shared->rows[i].e, now);
					n++;
				}
			LWLockRelease(shared->lock);
			break;
		default:
			for (int i = 0; i < local_count; i++)
				if (reset_matches(local_rows[i].dboid, &local_rows[i].e, dboid, name))
				{
					reset_entry(&local_rows[i].e, now);
					n++;
				}
	}
	return n;
}

/* A vectorize worker's counts reach the shared statistics (it never goes idle as a session). */
void
pg_embed_stat_flush(void)
{
#if PG_VERSION_NUM >= 180000
	if (scope == PGEMBED_SCOPE_SERVER_PGSTAT)
		(void) pgstat_report_stat(true);
#endif
}
