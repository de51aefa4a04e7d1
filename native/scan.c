/* nsysaudit's native CUDA API scan: the reduction of nsysaudit/read/scan.py (_reduce) in one pass
 * over the SQLite C API, with no value decoded into Python or Arrow.
 *
 * It runs the SELECT that scan.py builds (globalTid, start, end, returnValue, nameId, correlationId
 * for a rowid range) on its own read-only connection and keeps, as _reduce does:
 *   - per process (globalTid less globalTid mod 2^24, floor modulo as polars computes it; NULL for
 *     rows without globalTid): min(start), max(max(end), max(start)), row count;
 *   - the rows with a NULL or non-zero return, and the successful rows on a thread with library
 *     windows that overlap one of them (the last window starting at or before the row's end, if it
 *     ends at or after the row's start);
 *   - the successful rows whose nameId is marked (stream-capture calls), and how many successful
 *     rows have a counted nameId (free calls);
 *   - per (process, correlationId) of the allocation keys: the rows carrying it and the nameId of
 *     the first of them (rowid order);
 *   - integrity counts: NULL start/end/return/globalTid/nameId, end < start, nameIds missing from
 *     StringIds.
 * A value that is not an INTEGER (REAL, TEXT, BLOB) is read as NULL and its row counted, as the
 * stdlib reader of scan.py does. Called through ctypes, which releases the GIL: Python threads run
 * rowid ranges in parallel. Tested against the polars reduction in tests/test_scan.py.
 */
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCOL 6
enum { GTID, START, END, RET, NAME, CORR };
enum { P_NULL_START, P_NULL_END, P_NULL_RETURN, P_NULL_GTID, P_NULL_NAME, P_REVERSED, P_DANGLING, NPROBLEMS };

typedef struct {
    int64_t *values; /* NCOL per row */
    uint8_t *nulls;  /* bit c set: column c is NULL */
    int64_t n, cap;
} rowbuf;

typedef struct {
    int64_t gpid;
    int64_t min_start, max_end, max_start, rows;
    uint8_t used, gpid_null, has_start, has_end;
} span;

typedef struct {
    rowbuf selected, marked;
    int64_t problems[NPROBLEMS];
    int64_t counted, mismatch_rows, rows;
    span *spans; /* open addressing, span_cap slots; the NULL-gpid span is null_span */
    int64_t span_cap, span_n;
    span null_span;
    int64_t *key_rows, *key_first_name; /* per allocation key */
    uint8_t *key_first_null;
    char error[512];
} nsa_result;

static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static int push(rowbuf *b, const int64_t *v, uint8_t nulls) {
    if (b->n == b->cap) {
        int64_t cap = b->cap ? b->cap * 2 : 4096;
        int64_t *values = realloc(b->values, (size_t)cap * NCOL * sizeof(int64_t));
        if (!values) return -1;
        b->values = values;
        uint8_t *n = realloc(b->nulls, (size_t)cap);
        if (!n) return -1;
        b->nulls = n;
        b->cap = cap;
    }
    memcpy(b->values + b->n * NCOL, v, NCOL * sizeof(int64_t));
    b->nulls[b->n] = nulls;
    b->n++;
    return 0;
}

static int sorted_has(const int64_t *a, int64_t n, int64_t x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && a[lo] == x;
}

/* A set of ids: a bitmap when their range is small (the common case: string ids, correlation ids),
 * else binary search over the sorted array. */
typedef struct {
    const int64_t *a;
    int64_t n, lo;
    uint64_t span;
    uint64_t *bits;
} idset;

#define BITMAP_MAX_SPAN ((uint64_t)1 << 27)

static int idset_init(idset *s, const int64_t *a, int64_t n) {
    memset(s, 0, sizeof *s);
    s->a = a;
    s->n = n;
    if (n == 0) return 0;
    uint64_t span = (uint64_t)a[n - 1] - (uint64_t)a[0] + 1; /* a is sorted ascending */
    if (span == 0 || span > BITMAP_MAX_SPAN) return 0;
    s->bits = calloc((size_t)((span + 63) / 64), sizeof(uint64_t));
    if (!s->bits) return -1;
    s->lo = a[0];
    s->span = span;
    for (int64_t i = 0; i < n; i++) {
        uint64_t off = (uint64_t)a[i] - (uint64_t)s->lo;
        s->bits[off >> 6] |= (uint64_t)1 << (off & 63);
    }
    return 0;
}

static inline int idset_has(const idset *s, int64_t x) {
    if (s->n == 0) return 0;
    if (s->bits) {
        uint64_t off = (uint64_t)x - (uint64_t)s->lo;
        return x >= s->lo && off < s->span && ((s->bits[off >> 6] >> (off & 63)) & 1);
    }
    return sorted_has(s->a, s->n, x);
}

/* Windows of one thread: offset and count into the window arrays (sorted by gtid, then start). */
typedef struct {
    int64_t gtid, offset, count, pos; /* pos: the last answer, rows of a thread come mostly in time order */
    uint8_t used;
} wslot;


static span *span_of(nsa_result *r, int64_t gpid) {
    if (r->span_n * 2 >= r->span_cap) {
        int64_t cap = r->span_cap ? r->span_cap * 2 : 64;
        span *grown = calloc((size_t)cap, sizeof(span));
        if (!grown) return NULL;
        for (int64_t i = 0; i < r->span_cap; i++) {
            if (!r->spans[i].used) continue;
            uint64_t h = mix((uint64_t)r->spans[i].gpid) & (uint64_t)(cap - 1);
            while (grown[h].used) h = (h + 1) & (uint64_t)(cap - 1);
            grown[h] = r->spans[i];
        }
        free(r->spans);
        r->spans = grown;
        r->span_cap = cap;
    }
    uint64_t h = mix((uint64_t)gpid) & (uint64_t)(r->span_cap - 1);
    while (r->spans[h].used && r->spans[h].gpid != gpid) h = (h + 1) & (uint64_t)(r->span_cap - 1);
    if (!r->spans[h].used) {
        r->spans[h].used = 1;
        r->spans[h].gpid = gpid;
        r->span_n++;
    }
    return &r->spans[h];
}

static void add_to_span(span *s, const int64_t *v, uint8_t nulls) {
    s->rows++;
    if (!(nulls & (1 << START))) {
        if (!s->has_start || v[START] < s->min_start) s->min_start = v[START];
        if (!s->has_start || v[START] > s->max_start) s->max_start = v[START];
        s->has_start = 1;
    }
    if (!(nulls & (1 << END))) {
        if (!s->has_end || v[END] > s->max_end) s->max_end = v[END];
        s->has_end = 1;
    }
}

static int64_t capacity_for(int64_t n) {
    int64_t cap = 16;
    while (cap < 2 * n + 1) cap *= 2;
    return cap;
}

typedef struct {
    nsa_result *r;
    wslot *wins;
    int64_t wcap;
    const int64_t *w_start, *w_end;
    int64_t n_win;
    idset strings, marked, counted, key_corrs;
    int check_strings;
    const int64_t *key_gpid, *key_corr; /* sorted by correlation id (then gpid) */
    int64_t n_keys, key_pos;            /* key_pos: the last answer, ids mostly grow with the rowid */
    int failed;
} ctx;

/* The first key index with correlation id ``corr`` (the caller knows one exists). */
static int64_t first_key(ctx *x, int64_t corr) {
    const int64_t *k = x->key_corr;
    int64_t p = x->key_pos, n = x->n_keys;
    if (p < n && k[p] == corr && (p == 0 || k[p - 1] != corr)) return p;
    if (p + 1 < n && k[p + 1] == corr && k[p] != corr) return x->key_pos = p + 1;
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (k[mid] < corr) lo = mid + 1;
        else hi = mid;
    }
    return x->key_pos = lo;
}

/* One row, as the SELECT gives it: returns nonzero when out of memory. */
static int reduce_row(ctx *x, const int64_t *v, uint8_t nulls, uint8_t wrong) {
    nsa_result *r = x->r;
    wslot *wins = x->wins;
    int64_t wcap = x->wcap, n_win = x->n_win, n_keys = x->n_keys;
    const int64_t *w_start = x->w_start, *w_end = x->w_end;
    int check_strings = x->check_strings;
    r->rows++;
    r->mismatch_rows += wrong;
    int has_gtid = !(nulls & (1 << GTID)), has_start = !(nulls & (1 << START));
    int has_end = !(nulls & (1 << END)), has_ret = !(nulls & (1 << RET));
    int has_name = !(nulls & (1 << NAME)), has_corr = !(nulls & (1 << CORR));
    int64_t gpid = 0;
    if (has_gtid) {
        int64_t m = v[GTID] % (1 << 24);
        if (m < 0) m += (1 << 24);
        gpid = v[GTID] - m;
    }
    span *s = has_gtid ? span_of(r, gpid) : &r->null_span;
    if (!s) {
        snprintf(r->error, sizeof r->error, "out of memory");
        return -1;
    }
    add_to_span(s, v, nulls);
    r->problems[P_NULL_START] += !has_start;
    r->problems[P_NULL_END] += !has_end;
    r->problems[P_NULL_RETURN] += !has_ret;
    r->problems[P_NULL_GTID] += !has_gtid;
    r->problems[P_NULL_NAME] += !has_name;
    r->problems[P_REVERSED] += has_start && has_end && v[END] < v[START];
    if (check_strings && has_name && !idset_has(&x->strings, v[NAME])) r->problems[P_DANGLING]++;
    if (!has_ret || v[RET] != 0) {
        if (push(&r->selected, v, nulls)) return -1;
    } else {
        if (has_gtid && has_start && has_end && n_win) {
            uint64_t h = mix((uint64_t)v[GTID]) & (uint64_t)(wcap - 1);
            while (wins[h].used && wins[h].gtid != v[GTID]) h = (h + 1) & (uint64_t)(wcap - 1);
            if (wins[h].used) {
                /* the last window of the thread starting at or before the row's end */
                int64_t a = wins[h].offset, n = wins[h].count, lo_i = wins[h].pos;
                /* lo_i: how many windows start at or before the row's end; first the last answer
                 * and the one after it, then a binary search */
#define FITS(k) (((k) == 0 || w_start[a + (k) - 1] <= v[END]) && ((k) == n || w_start[a + (k)] > v[END]))
                if (!FITS(lo_i)) {
                    if (lo_i < n && FITS(lo_i + 1)) {
                        lo_i++;
                    } else {
                        int64_t hi_i = n;
                        lo_i = 0;
                        while (lo_i < hi_i) {
                            int64_t mid = lo_i + (hi_i - lo_i) / 2;
                            if (w_start[a + mid] <= v[END]) lo_i = mid + 1;
                            else hi_i = mid;
                        }
                    }
                    wins[h].pos = lo_i;
                }
#undef FITS
                if (lo_i > 0 && w_end[a + lo_i - 1] >= v[START] && push(&r->selected, v, nulls)) return -1;
            }
        }
        if (has_name && idset_has(&x->marked, v[NAME]) && push(&r->marked, v, nulls)) return -1;
        if (has_name && idset_has(&x->counted, v[NAME])) r->counted++;
    }
    if (n_keys && has_gtid && has_corr && idset_has(&x->key_corrs, v[CORR])) {
        for (int64_t k = first_key(x, v[CORR]); k < n_keys && x->key_corr[k] == v[CORR]; k++) {
            if (x->key_gpid[k] != gpid) continue;
            if (r->key_rows[k]++ == 0) {
                r->key_first_name[k] = v[NAME];
                r->key_first_null[k] = !has_name;
            }
            break;
        }
    }
    return 0;
}

static void reduce_step(sqlite3_context *context, int argc, sqlite3_value **argv) {
    ctx *x = sqlite3_user_data(context);
    if (x->failed || argc != NCOL) return;
    int64_t v[NCOL];
    uint8_t nulls = 0, wrong = 0;
    for (int c = 0; c < NCOL; c++) {
        int type = sqlite3_value_type(argv[c]);
        if (type == SQLITE_INTEGER) {
            v[c] = sqlite3_value_int64(argv[c]);
        } else {
            v[c] = 0;
            nulls |= (uint8_t)(1 << c);
            if (type != SQLITE_NULL) wrong = 1;
        }
    }
    if (reduce_row(x, v, nulls, wrong)) {
        x->failed = 1;
        sqlite3_result_error_nomem(context);
    }
}

static void reduce_final(sqlite3_context *context) { sqlite3_result_null(context); }

nsa_result *nsa_scan(const char *uri, const char *sql, int64_t lo, int64_t hi, const int64_t *w_gtid,
                     const int64_t *w_start, const int64_t *w_end, int64_t n_win, const int64_t *strings,
                     int64_t n_strings, int check_strings, const int64_t *marked, int64_t n_marked,
                     const int64_t *counted, int64_t n_counted, const int64_t *key_gpid, const int64_t *key_corr,
                     int64_t n_keys) {
    nsa_result *r = calloc(1, sizeof(nsa_result));
    if (!r) return NULL;
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    wslot *wins = NULL;
    ctx x;
    memset(&x, 0, sizeof x);
    int64_t wcap = capacity_for(n_win);
    wins = calloc((size_t)wcap, sizeof(wslot));
    r->key_rows = calloc((size_t)(n_keys ? n_keys : 1), sizeof(int64_t));
    r->key_first_name = calloc((size_t)(n_keys ? n_keys : 1), sizeof(int64_t));
    r->key_first_null = calloc((size_t)(n_keys ? n_keys : 1), 1);
    if (!wins || !r->key_rows || !r->key_first_name || !r->key_first_null) {
        snprintf(r->error, sizeof r->error, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n_win; i++) {
        uint64_t h = mix((uint64_t)w_gtid[i]) & (uint64_t)(wcap - 1);
        while (wins[h].used && wins[h].gtid != w_gtid[i]) h = (h + 1) & (uint64_t)(wcap - 1);
        if (!wins[h].used) {
            wins[h].used = 1;
            wins[h].gtid = w_gtid[i];
            wins[h].offset = i;
        }
        wins[h].count++;
    }
    for (int64_t i = 1; i < n_keys; i++) {
        if (key_corr[i] < key_corr[i - 1] || (key_corr[i] == key_corr[i - 1] && key_gpid[i] <= key_gpid[i - 1])) {
            snprintf(r->error, sizeof r->error, "allocation keys not sorted by (correlation id, gpid) and unique");
            goto done;
        }
    }
    if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(r->error, sizeof r->error, "open: %s", db ? sqlite3_errmsg(db) : "out of memory");
        goto done;
    }
    x.r = r;
    x.wins = wins;
    x.wcap = wcap;
    x.w_start = w_start;
    x.w_end = w_end;
    x.n_win = n_win;
    x.check_strings = check_strings;
    x.n_keys = n_keys;
    x.key_gpid = key_gpid;
    x.key_corr = key_corr;
    if (idset_init(&x.strings, strings, n_strings) || idset_init(&x.marked, marked, n_marked) ||
        idset_init(&x.counted, counted, n_counted) || idset_init(&x.key_corrs, key_corr, n_keys)) {
        snprintf(r->error, sizeof r->error, "out of memory");
        goto done;
    }
    if (sqlite3_create_function_v2(db, "nsa_reduce", NCOL, SQLITE_UTF8, &x, NULL, reduce_step, reduce_final, NULL) !=
        SQLITE_OK) {
        snprintf(r->error, sizeof r->error, "create_function: %s", sqlite3_errmsg(db));
        goto done;
    }
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK || sqlite3_column_count(stmt) != 1) {
        snprintf(r->error, sizeof r->error, "prepare: %s", sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_bind_int64(stmt, 1, lo);
    sqlite3_bind_int64(stmt, 2, hi);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    }
    if (x.failed) {
        snprintf(r->error, sizeof r->error, "out of memory");
        goto done;
    }
    if (rc != SQLITE_DONE) snprintf(r->error, sizeof r->error, "step: %s", sqlite3_errmsg(db));
    goto done;
done:
    if (stmt) sqlite3_finalize(stmt);
    if (db) sqlite3_close(db);
    free(wins);
    free(x.strings.bits);
    free(x.marked.bits);
    free(x.counted.bits);
    free(x.key_corrs.bits);
    return r;
}

/* The spans as arrays (NULL gpid last, when any row lacks globalTid): returns how many. */
int64_t nsa_spans(const nsa_result *r, int64_t *gpid, uint8_t *gpid_null, int64_t *first, uint8_t *first_null,
                  int64_t *last, uint8_t *last_null, int64_t *rows) {
    int64_t n = 0;
    for (int64_t i = 0; i <= r->span_cap; i++) {
        const span *s = i < r->span_cap ? &r->spans[i] : &r->null_span;
        if (i < r->span_cap ? !s->used : s->rows == 0) continue;
        gpid[n] = s->gpid;
        gpid_null[n] = i == r->span_cap;
        first[n] = s->min_start;
        first_null[n] = !s->has_start;
        if (s->has_end && s->has_start) last[n] = s->max_end > s->max_start ? s->max_end : s->max_start;
        else if (s->has_end) last[n] = s->max_end;
        else last[n] = s->max_start;
        last_null[n] = !s->has_end && !s->has_start;
        rows[n] = s->rows;
        n++;
    }
    return n;
}

int64_t nsa_span_count(const nsa_result *r) { return r->span_n + (r->null_span.rows > 0); }

void nsa_free(nsa_result *r) {
    if (!r) return;
    free(r->selected.values);
    free(r->selected.nulls);
    free(r->marked.values);
    free(r->marked.nulls);
    free(r->spans);
    free(r->key_rows);
    free(r->key_first_name);
    free(r->key_first_null);
    free(r);
}

const char *nsa_error(const nsa_result *r) { return r->error; }
int64_t nsa_rows(const nsa_result *r) { return r->rows; }
int64_t nsa_mismatch_rows(const nsa_result *r) { return r->mismatch_rows; }
int64_t nsa_counted(const nsa_result *r) { return r->counted; }
const int64_t *nsa_problems(const nsa_result *r) { return r->problems; }
int64_t nsa_selected_n(const nsa_result *r) { return r->selected.n; }
const int64_t *nsa_selected_values(const nsa_result *r) { return r->selected.values; }
const uint8_t *nsa_selected_nulls(const nsa_result *r) { return r->selected.nulls; }
int64_t nsa_marked_n(const nsa_result *r) { return r->marked.n; }
const int64_t *nsa_marked_values(const nsa_result *r) { return r->marked.values; }
const uint8_t *nsa_marked_nulls(const nsa_result *r) { return r->marked.nulls; }
const int64_t *nsa_key_rows(const nsa_result *r) { return r->key_rows; }
const int64_t *nsa_key_first_name(const nsa_result *r) { return r->key_first_name; }
const uint8_t *nsa_key_first_null(const nsa_result *r) { return r->key_first_null; }

/* --- a table of integer columns, read whole (the memory events) ------------------------------- */

typedef struct {
    int64_t *values; /* ncol per row */
    uint8_t *nulls;  /* ncol per row: 1 where NULL (or a value of another type) */
    int64_t n, cap, mismatched;
    int ncol, failed;
    char error[512];
} nsa_table;

/* Room for one more row: returns nonzero when out of memory. */
static int table_grow(nsa_table *t) {
    if (t->n < t->cap) return 0;
    int64_t cap = t->cap ? t->cap * 2 : 4096;
    int64_t *values = realloc(t->values, (size_t)(cap * t->ncol) * sizeof(int64_t));
    if (!values) return -1;
    t->values = values;
    uint8_t *nulls = realloc(t->nulls, (size_t)(cap * t->ncol));
    if (!nulls) return -1;
    t->nulls = nulls;
    t->cap = cap;
    return 0;
}

/* One value of a row: an INTEGER, else NULL (counted when it was a value of another type). */
static inline void table_set(nsa_table *t, int64_t *v, uint8_t *z, int type, int64_t value) {
    if (type == SQLITE_INTEGER) {
        *v = value;
        *z = 0;
    } else {
        *v = 0;
        *z = 1;
        t->mismatched += type != SQLITE_NULL;
    }
}

/* The aggregate nsa_collect(c0, ..., cN): each row SQLite hands it is appended (no row is
 * stepped out of the statement: the same reason the scan is an aggregate, about twice as fast). */
static void collect_step(sqlite3_context *context, int argc, sqlite3_value **argv) {
    nsa_table *t = sqlite3_user_data(context);
    if (t->failed || argc != t->ncol) return;
    if (table_grow(t)) {
        t->failed = 1;
        sqlite3_result_error_nomem(context);
        return;
    }
    int64_t *v = t->values + t->n * t->ncol;
    uint8_t *z = t->nulls + t->n * t->ncol;
    for (int c = 0; c < argc; c++) {
        int type = sqlite3_value_type(argv[c]);
        table_set(t, v + c, z + c, type, type == SQLITE_INTEGER ? sqlite3_value_int64(argv[c]) : 0);
    }
    t->n++;
}

/* The rows of ``sql``: its ``ncol`` columns, stepped row by row; or, with ``collect``, ``sql``
 * is one row of nsa_collect(...) over ``ncol`` arguments, which gathers them (rows in the order
 * SQLite visits them: use it where no ORDER BY must hold). */
nsa_table *nsa_read(const char *uri, const char *sql, int ncol, int collect) {
    nsa_table *t = calloc(1, sizeof(nsa_table));
    if (!t) return NULL;
    t->ncol = ncol;
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(t->error, sizeof t->error, "open: %s", db ? sqlite3_errmsg(db) : "out of memory");
        goto done;
    }
    if (collect && sqlite3_create_function_v2(db, "nsa_collect", ncol, SQLITE_UTF8, t, collect_step,
                                              NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(t->error, sizeof t->error, "create_function: %s", sqlite3_errmsg(db));
        goto done;
    }
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK ||
        sqlite3_column_count(stmt) != (collect ? 1 : ncol)) {
        snprintf(t->error, sizeof t->error, "prepare: %s", sqlite3_errmsg(db));
        goto done;
    }
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        if (collect) continue;
        if (table_grow(t)) goto oom;
        int64_t *v = t->values + t->n * ncol;
        uint8_t *z = t->nulls + t->n * ncol;
        for (int c = 0; c < ncol; c++) {
            int type = sqlite3_column_type(stmt, c);
            table_set(t, v + c, z + c, type, type == SQLITE_INTEGER ? sqlite3_column_int64(stmt, c) : 0);
        }
        t->n++;
    }
    if (t->failed) goto oom;
    if (rc != SQLITE_DONE) snprintf(t->error, sizeof t->error, "step: %s", sqlite3_errmsg(db));
    goto done;
oom:
    snprintf(t->error, sizeof t->error, "out of memory");
done:
    if (stmt) sqlite3_finalize(stmt);
    if (db) sqlite3_close(db);
    return t;
}

const char *nsa_table_error(const nsa_table *t) { return t->error; }
int64_t nsa_table_n(const nsa_table *t) { return t->n; }
int64_t nsa_table_mismatched(const nsa_table *t) { return t->mismatched; }
const int64_t *nsa_table_values(const nsa_table *t) { return t->values; }
const uint8_t *nsa_table_nulls(const nsa_table *t) { return t->nulls; }

void nsa_table_free(nsa_table *t) {
    if (!t) return;
    free(t->values);
    free(t->nulls);
    free(t);
}
