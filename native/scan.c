/* nsysaudit's native CUDA API scan: the reduction of nsysaudit/read/scan.py (_reduce) in one pass
 * over the SQLite C API, with no value decoded into Python or Arrow.
 *
 * It reads the six columns scan.py names (globalTid, start, end, returnValue, nameId, correlationId)
 * of a rowid range on its own read-only connection, from the table's pages where it can (below,
 * reduce_pages), else through the SELECT that scan.py builds, and keeps, as _reduce does:
 *   - per process (globalTid less globalTid mod 2^24, floor modulo as polars computes it; NULL for
 *     rows without globalTid): min(start), max(max(end), max(start)), row count;
 *   - the rows with a NULL or non-zero return, and the successful rows on a thread with library
 *     windows that overlap one of them (the last window starting at or before the row's end, if it
 *     ends at or after the row's start);
 *   - the successful rows whose nameId is marked (stream-capture calls), and how many successful
 *     rows have a counted nameId (free calls);
 *   - per (process, correlationId) of the allocation keys: the rows carrying it and the nameId of
 *     the first of them (rowid order);
 *   - the rows, whatever their return, of a (process, correlationId) of the wanted keys (the
 *     asynchronous copies of pageable memory the host stalls read: gpu_work.py), in rowid order;
 *   - where it reads the table's pages, per group of CORR_GROUP leaves the least and greatest
 *     correlationId its rows carry (a later search by correlation id reads only the groups whose
 *     bounds hold one of its ids: gpu_work.py's launches);
 *   - integrity counts: NULL start/end/return/globalTid/nameId, end < start, nameIds missing from
 *     StringIds.
 * A value that is not an INTEGER (REAL, TEXT, BLOB) is read as NULL and its row counted, as the
 * stdlib reader of scan.py does. Tested against the polars reduction in tests/test_reading_scan.py.
 *
 * It is the extension module nsysaudit.read._native (setup.py builds it with the package; the
 * binding, CPython's C API, is at the end of this file, its types in nsysaudit/read/_native.pyi).
 * Each call runs without the GIL, so Python threads run rowid ranges in parallel. It links the
 * SQLite library Python's own sqlite3 module uses (nsysaudit/read/native.py checks at import that
 * both report the same sqlite3_sourceid()): the SQLite that decides damage (PRAGMA quick_check,
 * nsysaudit/read/damage.py) is the SQLite that reads the rows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCOL 6
#define CORR_GROUP 16 /* leaves a group of the scan's correlationId bounds spans */
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
    rowbuf selected, marked, keyed;
    int64_t problems[NPROBLEMS];
    int64_t counted, mismatch_rows, rows;
    int64_t page_rows, handovers; /* rows reduced from the pages; 1 when SQLite read the range */
    span *spans; /* open addressing, span_cap slots; the NULL-gpid span is null_span */
    int64_t span_cap, span_n;
    span null_span;
    int64_t *key_rows, *key_first_name; /* per allocation key */
    int64_t *corr_lo, *corr_hi;         /* per group of CORR_GROUP leaves of the run read from its pages */
    uint8_t *corr_seen;                 /* 1: a row of the group carries a correlationId */
    int64_t n_groups;                   /* 0: none known (no pages read, or the run given back to SQLite) */
    uint8_t *key_first_null;
    char error[512];
    char handover[200]; /* why the page reader gave the range back to SQLite ("" when it did not) */
    char check[200];    /* with a plan: "" when the run's leaves are sound, else why the check is unsure */
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

/* The first index of the n sorted values a that is not below v (n where every one is). */
static int64_t lower_bound(const int64_t *a, int64_t n, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int sorted_has(const int64_t *a, int64_t n, int64_t x) {
    int64_t lo = lower_bound(a, n, x);
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
    idset strings, marked, counted, key_corrs, want_corrs;
    int check_strings;
    const int64_t *key_gpid, *key_corr; /* sorted by correlation id (then gpid) */
    int64_t n_keys, key_pos;            /* key_pos: the last answer, ids mostly grow with the rowid */
    const int64_t *want_gpid, *want_corr; /* the wanted keys, sorted by correlation id (then gpid) */
    int64_t n_want;
    const int64_t *leaf; /* the page reader's leaf being read (its index in the plan), and the run's first */
    int64_t first_leaf;
    int failed;
} ctx;

/* Whether n keys (gpid, corr) are sorted by correlation id, then gpid, each once. */
static int keys_sorted(const int64_t *gpid, const int64_t *corr, int64_t n) {
    for (int64_t i = 1; i < n; i++)
        if (corr[i] < corr[i - 1] || (corr[i] == corr[i - 1] && gpid[i] <= gpid[i - 1])) return 0;
    return 1;
}

/* The first key index with correlation id ``corr`` (the caller knows one exists). */
static int64_t first_key(ctx *x, int64_t corr) {
    const int64_t *k = x->key_corr;
    int64_t p = x->key_pos, n = x->n_keys;
    if (p < n && k[p] == corr && (p == 0 || k[p - 1] != corr)) return p;
    if (p + 1 < n && k[p + 1] == corr && k[p] != corr) return x->key_pos = p + 1;
    return x->key_pos = lower_bound(k, n, corr);
}

/* Whether (corr, gpid) is one of the wanted keys (the idset has said corr is one). */
static int wanted(const ctx *x, int64_t corr, int64_t gpid) {
    for (int64_t i = lower_bound(x->want_corr, x->n_want, corr); i < x->n_want && x->want_corr[i] == corr; i++)
        if (x->want_gpid[i] == gpid) return 1;
    return 0;
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
    if (x->n_want && has_gtid && has_corr && idset_has(&x->want_corrs, v[CORR]) && wanted(x, v[CORR], gpid) &&
        push(&r->keyed, v, nulls))
        return -1;
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

/* --- the table's own pages: read without the VDBE, and checked as PRAGMA quick_check checks them --
 * SQLite's VDBE spends about 1,100 instructions a row to hand the six integers to nsa_reduce (the
 * cursor, OP_Column six times, the aggregate's call); the reduction itself about 345. So where the
 * table is an ordinary rowid b-tree of a rollback-mode file, its pages are read through the
 * connection's own file handle (the VFS's xRead: no second descriptor, no mmap, so a file truncated
 * under us is a read error, not SIGBUS) and its records decoded here.
 *
 * Whether the table is damaged is SQLite's PRAGMA quick_check's to say (nsysaudit/read/damage.py),
 * for every engine. Reading the pages, this reader checks what quick_check(T) checks of the table
 * (SQLite 3.40's checkTreePage, the btreeInitPage and btreeComputeFreeSpace it calls, and the row
 * loop of its integrity-check program), stricter wherever that is simpler, never looser: every page
 * reached from the root once (none past the file, on the lock byte's page or reached twice), its
 * type, cell count, freeblocks, cells inside the page and, with the freeblocks, covering it with the
 * fragmented bytes its header counts; keys and rowids in order within their parents' bounds; every
 * leaf at one depth; overflow chains of the length their payload needs; each record's header read
 * to its end, its values adding up to its payload, each value of a type its column may hold without
 * quick_check saying a word. A table that passes is one quick_check calls sound; anything else
 * makes the check "unsure" (``why`` says where), and SQLite's own quick_check decides (its words are
 * the message). tests/test_hostile_damage.py holds the two to one answer on thousands of damaged
 * exports.
 *
 * Two steps. plan(): the interior pages from the root (about one page in 200), checked; they give
 * the leaves in key order and the bounds of each one's rowids. Then a run of leaves per call of
 * scan() (the threads share the plan) or check(): each leaf read once, checked, and its rows
 * reduced. What the reader leaves to SQLite (a record on overflow pages, one older than a column it
 * reads) gives the run back: what was reduced is reset and SQLite reads the run's rowid range while
 * its leaves are still checked. Where the check is unsure the run is SQLite's to read too, and a plan
 * unsure of an interior page leaves the whole table to SQLite (its quick_check, its reading by rowid
 * range). So the reader only reads what it has checked, and its rows are the ones SQLite reads.
 */
#define MAX_DEPTH 20   /* SQLite's cursor reads no deeper (BTCURSOR_MAX_DEPTH) */
#define RUN_PAGES 64   /* consecutive leaves read in one call */
#define MAX_FIELDS 256 /* the scan's columns lie among a record's first fields */
#define NOUT 8         /* the columns one read of the pages decodes at most (a byte of NULL bits a row) */
#define ROWID (-2)     /* in a layout: the column is the cell's rowid (no field of the record) */
#define PENDING_BYTE 0x40000000 /* SQLite's lock byte: its page is no b-tree's */

/* What quick_check lets a column hold without a word (by its affinity; a class per column, from
 * nsysaudit/read/damage.py): anything; a NULL, a number or a BLOB; a NULL, a TEXT or a BLOB. With
 * COL_DEFAULT, the column has a DEFAULT: a record older than the column holds it, and its type is
 * SQLite's to judge (without one, such a record holds NULL there). */
enum { COL_ANY = 0, COL_NUMBER = 1, COL_TEXT = 2, COL_CLASS = 3, COL_DEFAULT = 4 };
/* A page's (a leaf's, a run's) outcome: read and sound; the check unsure (why says where); the
 * reader leaving the rows to SQLite, the check sound so far; out of memory. */
enum { PAGE_OK = 0, PAGE_UNSURE = 1, PAGE_HANDOVER = 2, PAGE_FAILED = -1 };

typedef struct {
    int64_t page_size, usable, n_pages;
    int64_t max_local, min_local; /* a table leaf's payload: kept on its page up to max_local bytes */
    int depth;                    /* of the leaves (0: the root is the only leaf) */
    uint8_t *refs;                /* a bit per page: reached from the root (set atomically: threads) */
    int64_t *leaf, *upper;        /* the leaves in key order; leaf i's rowids lie in (upper[i-1], upper[i]] */
    int64_t n_leaves, cap;
    char why[200];                /* "": the file's header and the interior pages are sound */
} plan_t;

typedef struct {
    uint32_t pc, size, payload, local; /* the cell's offset and bytes; its record's bytes, those on the page */
    uint32_t head;                     /* the cell's bytes before its record */
    int64_t key;                       /* the rowid (a leaf), the key (an interior page) */
} cell_t;

/* What checking one page needs, sized for the plan's page size (one per thread). */
typedef struct {
    plan_t *plan;
    cell_t *cells;
    uint32_t *cover, *blocks, *merged; /* a page's cells and freeblocks: first << 16 | last byte */
    char *why;                         /* where a page's check says why it is unsure */
} checker;

static inline uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* SQLite's varint at p, not reading at or past end: its length, 0 when it does not fit. */
static inline int varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        v = (v << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    if (p + 8 >= end) return 0;
    *out = (v << 8) | p[8];
    return 9;
}

/* The check of page pgno is unsure: why, for the message of a reader that could not say (debugging,
 * tests); returns PAGE_UNSURE. */
static int unsure(char *why, int64_t pgno, const char *what) {
    snprintf(why, 200, "page %lld: %s", (long long)pgno, what);
    return PAGE_UNSURE;
}

static int checker_init(checker *c, plan_t *pl, char *why) {
    size_t cells = (size_t)((pl->page_size - 8) / 6 + 1), spans = cells + (size_t)(pl->usable / 4) + 2;
    c->plan = pl;
    c->why = why;
    c->cells = malloc(cells * sizeof(cell_t));
    c->cover = malloc(spans * sizeof(uint32_t));
    c->blocks = malloc(spans * sizeof(uint32_t));
    c->merged = malloc(spans * sizeof(uint32_t));
    return c->cells && c->cover && c->blocks && c->merged ? 0 : -1;
}

static void checker_free(checker *c) {
    free(c->cells);
    free(c->cover);
    free(c->blocks);
    free(c->merged);
}

/* Page pgno reached from the tree (a child page, an overflow page): NULL, or why it may not be. */
static const char *reach(plan_t *pl, int64_t pgno) {
    if (pgno < 2 || pgno > pl->n_pages) return "a page number outside the file";
    uint8_t bit = (uint8_t)(1 << (pgno & 7));
    if (__atomic_fetch_or(&pl->refs[pgno >> 3], bit, __ATOMIC_RELAXED) & bit)
        return "a page reached twice (or the lock byte's page)";
    return NULL;
}

static int by_value(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* What checkTreePage and the btreeInitPage and btreeComputeFreeSpace it calls check of one page of
 * a table's b-tree (SQLite 3.40), stricter where that is simpler: its type (an interior page or a
 * leaf, as the tree needs it here), its cell count (cells on every page but a leaf root), the cell
 * pointers before the content area, the freeblocks in order inside it and no more free bytes than
 * the page has; each cell inside the page, its keys (a leaf's rowids) in order within (lower, upper]
 * (lower only when has_lower); cells and freeblocks covering the page once, with the fragmented
 * bytes its header counts. Fills c->cells with its n cells. */
static int check_page(checker *c, int64_t pgno, const uint8_t *page, int leaf, int root, int has_lower,
                      int64_t lower, int64_t upper, uint32_t *n_cells) {
    const plan_t *pl = c->plan;
    const uint32_t usable = (uint32_t)pl->usable, max_local = (uint32_t)pl->max_local, min_local = (uint32_t)pl->min_local;
    if (page[0] != (leaf ? 0x0D : 0x05)) return unsure(c->why, pgno, leaf ? "not a table leaf page" : "not an interior table page");
    uint32_t n = be16(page + 3), first = (leaf ? 8 : 12) + 2 * be16(page + 3), top = be16(page + 5);
    if (n > (uint32_t)((pl->page_size - 8) / 6)) return unsure(c->why, pgno, "more cells than a page holds");
    if (n == 0 && !(leaf && root)) return unsure(c->why, pgno, "a page without cells");
    if (top == 0) top = 65536;
    if (top < first || top > usable) return unsure(c->why, pgno, "cell pointers past the content area");
    /* the freeblocks (btreeComputeFreeSpace): after the content area's start, in order, inside the page */
    uint32_t free_bytes = page[7] + top, fb = be16(page + 1), n_blocks = 0;
    if (fb) {
        uint32_t next, size;
        if (fb < top) return unsure(c->why, pgno, "a freeblock before the content area");
        for (;;) {
            if (fb > usable - 4) return unsure(c->why, pgno, "a freeblock past the page");
            next = be16(page + fb);
            size = be16(page + fb + 2);
            free_bytes += size;
            c->blocks[n_blocks++] = fb << 16 | ((fb + size - 1) & 0xffff);
            if (next <= fb + size + 3) break;
            fb = next;
        }
        if (next > 0) return unsure(c->why, pgno, "freeblocks out of order");
        if (fb + size > usable) return unsure(c->why, pgno, "a freeblock past the page");
    }
    if (free_bytes > usable || free_bytes < first) return unsure(c->why, pgno, "more free bytes than the page has");
    const uint8_t *end = page + usable;
    for (uint32_t i = 0; i < n; i++) {
        cell_t *e = &c->cells[i];
        uint32_t pc = be16(page + (leaf ? 8 : 12) + 2 * i);
        if (pc < top || pc > usable - 4) return unsure(c->why, pgno, "a cell outside the content area");
        uint64_t payload = 0, key;
        int a = 0, b;
        if (leaf) { /* the record's size (a u32 to SQLite: 4 bytes at most here), the rowid */
            a = varint(page + pc, end, &payload);
            if (!a || a > 4) return unsure(c->why, pgno, "a cell's record size unreadable");
            b = varint(page + pc + a, end, &key);
        } else { /* the left child, the key */
            b = varint(page + pc + 4, end, &key);
            a = 4;
        }
        if (!b) return unsure(c->why, pgno, "a cell runs past its page");
        uint32_t head = (uint32_t)(a + b), size;
        e->payload = (uint32_t)payload;
        if (!leaf) {
            size = head;
            e->local = 0;
        } else if (payload <= max_local) { /* btreeParseCellPtr's sizes, which its coverage counts */
            e->local = (uint32_t)payload;
            size = head + e->local < 4 ? 4 : head + e->local;
        } else {
            uint32_t surplus = min_local + (uint32_t)((payload - min_local) % (usable - 4));
            e->local = surplus <= max_local ? surplus : min_local;
            size = head + e->local + 4; /* and the first overflow page's number */
        }
        if (pc + size > usable) return unsure(c->why, pgno, "a cell runs past its page");
        e->pc = pc;
        e->size = size;
        e->head = head;
        e->key = (int64_t)key;
        if (i > 0 ? e->key <= c->cells[i - 1].key : has_lower && e->key <= lower) return unsure(c->why, pgno, "keys out of order");
        if (e->key > upper) return unsure(c->why, pgno, "keys out of order");
    }
    /* the coverage (checkTreePage's min-heap, as a merge): the cells, by offset (SQLite writes them
     * one way or the other: sorted either way, or sorted here), and the freeblocks (in order
     * already), each byte of the page used once */
    uint32_t m = n, up = 1, down = 1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t span = c->cells[i].pc << 16 | (c->cells[i].pc + c->cells[i].size - 1);
        up &= i == 0 || c->cover[i - 1] <= span;
        down &= i == 0 || c->cover[i - 1] >= span;
        c->cover[i] = span;
    }
    if (!up && down) {
        for (uint32_t i = 0; i < m / 2; i++) {
            uint32_t t = c->cover[i];
            c->cover[i] = c->cover[m - 1 - i];
            c->cover[m - 1 - i] = t;
        }
    } else if (!up) {
        qsort(c->cover, m, sizeof *c->cover, by_value);
    }
    uint32_t i = 0, j = 0, k = 0;
    while (i < m || j < n_blocks) c->merged[k++] = j == n_blocks || (i < m && c->cover[i] <= c->blocks[j]) ? c->cover[i++] : c->blocks[j++];
    uint32_t prev = top - 1, frag = 0;
    for (i = 0; i < k; i++) {
        uint32_t x = c->merged[i];
        if ((prev & 0xffff) >= (x >> 16)) return unsure(c->why, pgno, "bytes of the page used twice");
        frag += (x >> 16) - (prev & 0xffff) - 1;
        prev = x;
    }
    frag += usable - (prev & 0xffff) - 1;
    if (frag != page[7]) return unsure(c->why, pgno, "fragmented bytes other than its header says");
    *n_cells = n;
    return PAGE_OK;
}

/* pages [pgno, pgno + n) into buf: 1, or 0 on a read error (a short read: the file shrank). */
static int read_pages(sqlite3_file *fp, uint8_t *buf, int64_t pgno, int64_t n, int64_t page_size) {
    return fp->pMethods->xRead(fp, buf, (int)(n * page_size), (pgno - 1) * page_size) == SQLITE_OK;
}

typedef struct {
    plan_t *pl;
    checker c;
    sqlite3_file *fp;
    uint8_t *page;
    int64_t *keys[MAX_DEPTH], *kids[MAX_DEPTH]; /* of each interior page on the path */
} planner;

/* The interior page pgno at depth (above the leaves) and its subtree's interior pages, checked; its
 * leaves appended in key order. PAGE_OK, PAGE_UNSURE (pl->why) or PAGE_FAILED (out of memory). */
static int plan_page(planner *w, int64_t pgno, int depth, int has_lower, int64_t lower, int64_t upper) {
    plan_t *pl = w->pl;
    uint32_t n;
    if (!read_pages(w->fp, w->page, pgno, 1, pl->page_size)) return unsure(pl->why, pgno, "a read error");
    int rc = check_page(&w->c, pgno, w->page, 0, depth == 0, has_lower, lower, upper, &n);
    if (rc != PAGE_OK) return rc;
    int64_t *keys = w->keys[depth], *kids = w->kids[depth];
    for (uint32_t i = 0; i < n; i++) {
        keys[i] = w->c.cells[i].key;
        kids[i] = be32(w->page + w->c.cells[i].pc);
    }
    kids[n] = be32(w->page + 8);
    /* no rowid can follow a key of 2^63 - 1: its right child would be a leaf without cells */
    if (keys[n - 1] == INT64_MAX) return unsure(pl->why, pgno, "keys out of order");
    for (uint32_t i = 0; i <= n; i++) {
        const char *why = reach(pl, kids[i]);
        if (why) return unsure(pl->why, pgno, why);
        int64_t lo = i > 0 ? keys[i - 1] : lower, hi = i < n ? keys[i] : upper;
        if (depth + 1 < pl->depth) {
            rc = plan_page(w, kids[i], depth + 1, i > 0 || has_lower, lo, hi);
            if (rc != PAGE_OK) return rc;
            continue;
        }
        if (pl->n_leaves == pl->cap) {
            int64_t cap = pl->cap ? 2 * pl->cap : 1024;
            int64_t *leaf = realloc(pl->leaf, (size_t)cap * sizeof(int64_t));
            if (leaf) pl->leaf = leaf;
            int64_t *up = leaf ? realloc(pl->upper, (size_t)cap * sizeof(int64_t)) : NULL;
            if (!up) return PAGE_FAILED;
            pl->upper = up;
            pl->cap = cap;
        }
        pl->leaf[pl->n_leaves] = kids[i];
        pl->upper[pl->n_leaves++] = hi;
    }
    return PAGE_OK;
}

static void plan_free(plan_t *pl) {
    if (!pl) return;
    free(pl->refs);
    free(pl->leaf);
    free(pl->upper);
    free(pl);
}

/* The table's root page, or 0 (none, or not one integer). */
static int64_t root_page(sqlite3 *db, const char *table) {
    sqlite3_stmt *stmt = NULL;
    int64_t root = 0;
    if (sqlite3_prepare_v2(db, "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?1", -1, &stmt,
                           NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_text(stmt, 1, table, -1, SQLITE_STATIC);
    if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_type(stmt, 0) == SQLITE_INTEGER) {
        root = sqlite3_column_int64(stmt, 0);
        if (sqlite3_step(stmt) != SQLITE_DONE) root = 0;
    }
    sqlite3_finalize(stmt);
    return root;
}

/* The connection's file handle, and the file's header and size: 0, or -1 where it cannot be read. */
static int file_of(sqlite3 *db, sqlite3_file **fp, uint8_t *hdr, sqlite3_int64 *size) {
    return sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, fp) == SQLITE_OK && *fp && (*fp)->pMethods &&
                   (*fp)->pMethods->xRead(*fp, hdr, 100, 0) == SQLITE_OK &&
                   (*fp)->pMethods->xFileSize(*fp, size) == SQLITE_OK
               ? 0
               : -1;
}

/* The plan of ``table`` (see above) on connection db: NULL when out of memory, else a plan whose why
 * is "" (its leaves listed) or says why the table is SQLite's to read and check. */
static plan_t *plan_table(sqlite3 *db, const char *table) {
    plan_t *pl = calloc(1, sizeof(plan_t));
    if (!pl) return NULL;
    planner w;
    memset(&w, 0, sizeof w);
    uint8_t hdr[100];
    sqlite3_int64 file_size = 0;
    int64_t root = root_page(db, table);
    if (root < 2) {
        snprintf(pl->why, sizeof pl->why, "the table's root page not found");
        return pl;
    }
    if (file_of(db, &w.fp, hdr, &file_size)) {
        snprintf(pl->why, sizeof pl->why, "the file cannot be read through its handle");
        return pl;
    }
    pl->page_size = be16(hdr + 16) == 1 ? 65536 : be16(hdr + 16);
    /* SQLite 3, rollback journal (WAL would put pages elsewhere), a power-of-two page size, whole
     * pages, the header's page count (when valid) the file's, no auto-vacuum (whose pointer map
     * quick_check checks too) */
    if (memcmp(hdr, "SQLite format 3", 16) != 0 || hdr[18] != 1 || hdr[19] != 1 || pl->page_size < 512 ||
        (pl->page_size & (pl->page_size - 1)) || file_size % pl->page_size) {
        snprintf(pl->why, sizeof pl->why, "not a rollback-mode SQLite 3 file of whole pages");
        return pl;
    }
    pl->usable = pl->page_size - hdr[20];
    pl->n_pages = file_size / pl->page_size;
    if (pl->usable < 480 || (be32(hdr + 24) == be32(hdr + 92) && be32(hdr + 28) != 0 && be32(hdr + 28) != pl->n_pages) ||
        be32(hdr + 52) != 0 || root > pl->n_pages || pl->n_pages > INT32_MAX) {
        snprintf(pl->why, sizeof pl->why, "a page's usable size, the page count or auto-vacuum not as the reader needs");
        return pl;
    }
    pl->max_local = pl->usable - 35;
    pl->min_local = (pl->usable - 12) * 32 / 255 - 23;
    size_t cells = (size_t)((pl->page_size - 8) / 6 + 1);
    pl->refs = calloc((size_t)(pl->n_pages / 8 + 1), 1);
    w.pl = pl;
    w.page = malloc((size_t)pl->page_size);
    if (!pl->refs || !w.page || checker_init(&w.c, pl, pl->why)) goto failed;
    int64_t pending = PENDING_BYTE / pl->page_size + 1;
    if (pending <= pl->n_pages) pl->refs[pending >> 3] |= (uint8_t)(1 << (pending & 7));
    const char *why = reach(pl, root);
    if (why) {
        unsure(pl->why, root, why);
        goto done;
    }
    /* the leaves' depth: the left-most path's (every other leaf's is checked against it) */
    for (int64_t pgno = root;;) {
        if (!read_pages(w.fp, w.page, pgno, 1, pl->page_size)) {
            unsure(pl->why, pgno, "a read error");
            goto done;
        }
        if (w.page[0] == 0x0D) break;
        uint32_t pc = be16(w.page + 12);
        if (w.page[0] != 0x05 || be16(w.page + 3) == 0 || pc > pl->usable - 4 || ++pl->depth > MAX_DEPTH - 2) {
            unsure(pl->why, pgno, w.page[0] != 0x05 ? "not a table b-tree page" : "a child page unreadable or too deep");
            goto done;
        }
        pgno = be32(w.page + pc);
        if (pgno < 2 || pgno > pl->n_pages) {
            unsure(pl->why, pgno, "a page number outside the file");
            goto done;
        }
    }
    if (pl->depth == 0) { /* the root is the only leaf */
        pl->leaf = malloc(sizeof(int64_t));
        pl->upper = malloc(sizeof(int64_t));
        if (!pl->leaf || !pl->upper) goto failed;
        pl->leaf[0] = root;
        pl->upper[0] = INT64_MAX;
        pl->n_leaves = pl->cap = 1;
        goto done;
    }
    for (int d = 0; d < pl->depth; d++)
        if (!(w.keys[d] = malloc(cells * sizeof(int64_t))) || !(w.kids[d] = malloc(cells * sizeof(int64_t)))) goto failed;
    if (plan_page(&w, root, 0, 0, 0, INT64_MAX) == PAGE_FAILED) goto failed;
    goto done;
failed:
    plan_free(pl);
    pl = NULL;
done:
    checker_free(&w.c);
    free(w.page);
    for (int d = 0; d < MAX_DEPTH; d++) {
        free(w.keys[d]);
        free(w.kids[d]);
    }
    return pl;
}

/* For a one-byte serial type (below 128): its value's size (0xff: types 10 and 11, reserved), and
 * whether quick_check names it in a column of each class (a TEXT where a number belongs, a number
 * where TEXT does). Filled once, when the module is loaded. */
static uint8_t SHORT_SIZE[128], NAMED[COL_CLASS + 1][128];
/* Per column class (COL_CLASS + 1: a field past the table's columns) and one-byte serial type: the
 * value's size (bits 0-5, at most 57), FAST_RESERVED for type 10 or 11, FAST_NAMED where the check
 * names a value of that type in such a column (record()'s fast walk of a header). */
#define FAST_RESERVED 0x40
#define FAST_NAMED 0x80
static uint8_t FAST[COL_CLASS + 2][128];

static void fill_tables(void) {
    for (int st = 0; st < 128; st++) {
        SHORT_SIZE[st] = st == 10 || st == 11 ? 0xff : st >= 12 ? (uint8_t)((st - 12) / 2) : (uint8_t)"\0\1\2\3\4\6\10\10\0\0"[st];
        NAMED[COL_NUMBER][st] = st >= 13 && (st & 1);
        NAMED[COL_TEXT][st] = st >= 1 && st <= 9;
    }
    for (int c = 0; c <= COL_CLASS + 1; c++)
        for (int st = 0; st < 128; st++)
            FAST[c][st] = SHORT_SIZE[st] == 0xff ? FAST_RESERVED
                          : (uint8_t)(SHORT_SIZE[st] | (c <= COL_CLASS && NAMED[c][st] ? FAST_NAMED : 0));
}

/* The size of a value of serial type st (10 and 11 are reserved: UINT64_MAX). */
static inline uint64_t serial_size(uint64_t st) {
    static const uint64_t small[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, UINT64_MAX, UINT64_MAX};
    return st >= 12 ? (st - 12) / 2 : small[st];
}

/* The serial type at *h (before end), h moved past it: 0 when it does not fit. */
static inline int serial_type(const uint8_t **h, const uint8_t *end, uint64_t *st) {
    if (**h < 0x80) { /* every type up to a 57-byte string: one byte */
        *st = *(*h)++;
        return 1;
    }
    int m = varint(*h, end, st);
    *h += m;
    return m;
}

/* A run of leaves, read and checked on one connection (one per thread). */
typedef struct {
    checker c;
    sqlite3_file *fp;
    uint8_t *run, *overflow; /* run_n pages from page run_first; one overflow page */
    int64_t run_first, run_n;
    const uint8_t *classes;  /* each column's class (COL_...) */
    int n_cols;
    const int32_t *layout;   /* per column read: its field in the record, -1 (NULL) or ROWID; NULL: check only */
    int n_out;               /* the columns read (the scan's NCOL; read_pages' its caller's, at most NOUT) */
    int max_field;
    int sound;               /* the check: 1 until it is unsure (why: of the first doubt) */
    int64_t leaf;            /* the leaf being read (its index in the plan) */
    char why[200], handover[200], page_why[200];
    const uint8_t *fast[MAX_FIELDS]; /* per field: its column's row of FAST */
} leaves;

/* The check is unsure (the first doubt is the one said). */
static void doubt(leaves *r, int64_t pgno, const char *what) {
    if (r->sound) unsure(r->why, pgno, what);
    r->sound = 0;
}

/* The reader leaves the run's rows to SQLite; returns PAGE_HANDOVER. */
static int hand_over(leaves *r, int64_t pgno, const char *what) {
    unsure(r->handover, pgno, what);
    return PAGE_HANDOVER;
}

/* The leaf at pgno; ahead: how many pages from pgno on the caller will want (read in one call). */
static const uint8_t *leaf_at(leaves *r, int64_t pgno, int64_t ahead) {
    if (pgno >= r->run_first && pgno < r->run_first + r->run_n) return r->run + (pgno - r->run_first) * r->c.plan->page_size;
    r->run_n = 0;
    if (!read_pages(r->fp, r->run, pgno, ahead, r->c.plan->page_size)) return NULL;
    r->run_first = pgno;
    r->run_n = ahead;
    return r->run;
}

/* One record (its page's bytes at a: local of its payload bytes), its header read to its end: its
 * fields' sizes adding up to the payload (else the check is unsure and the reader hands over), a
 * value in each column of a type the column's class lets it hold (else the check is unsure); with
 * decode, the scan's six values as reduce_step reads them. PAGE_OK, or PAGE_HANDOVER (r->handover:
 * the header unreadable, a value off the page, a field older than its column). */
static int record(leaves *r, int64_t pgno, const uint8_t *a, uint64_t n, uint64_t local, int decode, int64_t key,
                  int64_t *v, uint8_t *nulls, uint8_t *wrong) {
    uint64_t header, st, size, off;
    const char *broken = NULL;
    int k = varint(a, a + local, &header);
    /* OP_Column's own bounds on a header (98,307 bytes), and here all of it on the page */
    if (!k || header < (uint64_t)k || header > n || header > local || header > 98307) {
        doubt(r, pgno, "a record header larger than its record");
        return hand_over(r, pgno, "a record header larger than its record");
    }
    uint64_t types[MAX_FIELDS], offsets[MAX_FIELDS];
    const uint8_t *h = a + k, *end = a + header, *classes = r->classes;
    const int kept = decode ? r->max_field + 1 : 0, n_cols = r->n_cols; /* kept: the fields decoding needs */
    int fields = 0, named = 0;
    /* The usual record first: one-byte serial types only, none reserved, adding up to the payload (each
     * field's size and check from its column's FAST row); any other is walked again below, field by
     * field, as the first problem must be said. */
    uint8_t any = 0;
    for (off = header; h < end && *h < 0x80 && fields < MAX_FIELDS; fields++, h++) {
        uint8_t x = r->fast[fields][*h];
        any |= x;
        if (fields < kept) {
            types[fields] = *h;
            offsets[fields] = off;
        }
        off += x & 0x3f;
    }
    if (h == end && !(any & FAST_RESERVED) && off == n) {
        named = (any & FAST_NAMED) != 0;
    } else for (h = a + k, fields = 0, off = header; h < end; fields++) {
        if (*h < 0x80) { /* every type up to a 57-byte string: one byte, its size and checks from tables */
            st = *h++;
            size = SHORT_SIZE[st];
            if (size == 0xff) {
                broken = "a record's header unreadable";
                break;
            }
            named |= fields < n_cols && NAMED[classes[fields] & COL_CLASS][st];
        } else {
            if (!serial_type(&h, end, &st) || st > 0x7fffffff) {
                broken = "a record's header unreadable";
                break;
            }
            size = serial_size(st);
            named |= fields < n_cols && (classes[fields] & COL_CLASS) == COL_NUMBER && (st & 1);
        }
        if (size > n - off) {
            broken = "a record's values do not fit in it";
            break;
        }
        if (fields < kept) {
            types[fields] = st;
            offsets[fields] = off;
        }
        off += size;
    }
    if (named) doubt(r, pgno, "a value of a type its column's check names");
    if (!broken && off != n) broken = "a record's values do not fill it";
    if (broken) {
        doubt(r, pgno, broken);
        return hand_over(r, pgno, broken);
    }
    /* a record older than ALTER TABLE ADD COLUMN: NULL there, or the column's DEFAULT (SQLite's to judge) */
    for (int f = fields; f < r->n_cols; f++)
        if (r->classes[f] & COL_DEFAULT) doubt(r, pgno, "a record older than a column with a DEFAULT");
    if (!decode) return PAGE_OK;
    *nulls = 0;
    *wrong = 0;
    for (int c = 0; c < r->n_out; c++) {
        int f = r->layout[c];
        v[c] = 0;
        if (f == ROWID) {
            v[c] = key;
            continue;
        }
        if (f < 0) {
            *nulls |= (uint8_t)(1 << c);
            continue;
        }
        if (f >= fields) return hand_over(r, pgno, "a record older than a column (its DEFAULT is SQLite's)");
        uint64_t t = types[f];
        if (offsets[f] + serial_size(t) > local) return hand_over(r, pgno, "a value on overflow pages");
        if (t == 0) {
            *nulls |= (uint8_t)(1 << c);
        } else if (t <= 9 && t != 7) {
            /* an integer of 0 (types 8 and 9: the values 0 and 1) to 8 bytes, big-endian: read as 8
             * bytes and shifted, without a branch per size (the run's buffer has 8 bytes' slack) */
            static const int bytes[10] = {0, 1, 2, 3, 4, 6, 8, 0, 0, 0};
            uint64_t raw;
            memcpy(&raw, a + offsets[f], sizeof raw);
            int64_t value = (int64_t)__builtin_bswap64(raw) >> (64 - 8 * (bytes[t] ? bytes[t] : 1));
            v[c] = bytes[t] ? value : (int64_t)t - 8;
        } else { /* REAL, TEXT, BLOB: read as NULL and counted (the scan counts the row), as SQLite's readers do */
            *nulls |= (uint8_t)(1 << c);
            (*wrong)++;
        }
    }
    return PAGE_OK;
}

/* The overflow chain of a cell (checkList): pages each reached once, as many as its payload needs
 * ((payload - local + usable - 5) / (usable - 4)), the last pointing nowhere (else the check doubts). */
static void check_chain(leaves *r, int64_t pgno, const uint8_t *cell, const cell_t *e) {
    plan_t *pl = r->c.plan;
    uint64_t need = ((uint64_t)e->payload - e->local + (uint64_t)pl->usable - 5) / (uint64_t)(pl->usable - 4), got = 0;
    for (int64_t next = be32(cell + e->size - 4); next != 0; got++) {
        const char *why = got == need ? "an overflow chain longer than its record" : reach(pl, next);
        if (!why && !read_pages(r->fp, r->overflow, next, 1, pl->page_size)) why = "a read error";
        if (why) {
            doubt(r, pgno, why);
            return;
        }
        next = be32(r->overflow);
    }
    if (got != need) doubt(r, pgno, "an overflow chain shorter than its record");
}

/* Where the rows a run of leaves decodes go: the scan's reduction (scan_row) or a table (read_pages'
 * take_row); nonzero when out of memory. */
typedef int (*row_sink)(void *arg, const int64_t *v, uint8_t nulls, uint8_t wrong);

/* Leaves [first, last) of the plan: each checked (r->sound, r->why), and with a sink (and the
 * reader's layout) its rows decoded into it. PAGE_OK: every row decoded (with a sink); PAGE_HANDOVER:
 * the rows are SQLite's to read (r->handover says why); PAGE_FAILED: out of memory. A page the check
 * is unsure of ends the reading (its cells may lie anywhere); a value the check names does not. */
static int read_leaves(leaves *r, row_sink sink, void *arg, int64_t first, int64_t last) {
    plan_t *pl = r->c.plan;
    int outcome = PAGE_OK, decode = sink != NULL && r->layout != NULL;
    for (int64_t i = first; i < last && (decode || r->sound); i++) {
        int64_t pgno = pl->leaf[i], ahead = 1;
        r->leaf = i;
        if (!(pgno >= r->run_first && pgno < r->run_first + r->run_n))
            while (i + ahead < last && ahead < RUN_PAGES && pl->leaf[i + ahead] == pgno + ahead) ahead++;
        const uint8_t *page = leaf_at(r, pgno, ahead);
        if (!page) {
            doubt(r, pgno, "a read error");
            return hand_over(r, pgno, "a read error");
        }
        uint32_t n;
        if (check_page(&r->c, pgno, page, 1, pl->depth == 0, i > 0, i > 0 ? pl->upper[i - 1] : 0, pl->upper[i], &n)) {
            if (r->sound) snprintf(r->why, sizeof r->why, "%s", r->page_why);
            r->sound = 0;
            snprintf(r->handover, sizeof r->handover, "%s", r->page_why);
            return PAGE_HANDOVER;
        }
        for (uint32_t k = 0; k < n; k++) {
            const cell_t *e = &r->c.cells[k];
            const uint8_t *cell = page + e->pc;
            if (e->payload > e->local && r->sound) check_chain(r, pgno, cell, e);
            int64_t v[NOUT];
            uint8_t nulls, wrong;
            if (record(r, pgno, cell + e->head, e->payload, e->local, decode, e->key, v, &nulls, &wrong) ==
                PAGE_HANDOVER) {
                decode = 0; /* the rest is only checked */
                outcome = PAGE_HANDOVER;
            }
            if (!decode) continue;
            if (sink(arg, v, nulls, wrong)) return PAGE_FAILED;
        }
    }
    return sink != NULL && r->layout == NULL ? PAGE_HANDOVER : outcome;
}

/* The scan's sink: a row reduced (its values of another type: the row counted once), and its
 * correlationId within its group's bounds. */
static int scan_row(void *arg, const int64_t *v, uint8_t nulls, uint8_t wrong) {
    ctx *x = arg;
    nsa_result *r = x->r;
    if (reduce_row(x, v, nulls, wrong != 0)) return -1;
    r->page_rows++;
    if (r->n_groups && !(nulls & (1 << CORR))) {
        int64_t g = (*x->leaf - x->first_leaf) / CORR_GROUP;
        if (!r->corr_seen[g] || v[CORR] < r->corr_lo[g]) r->corr_lo[g] = v[CORR];
        if (!r->corr_seen[g] || v[CORR] > r->corr_hi[g]) r->corr_hi[g] = v[CORR];
        r->corr_seen[g] = 1;
    }
    return 0;
}

static int leaves_init(leaves *r, plan_t *pl, sqlite3 *db, const uint8_t *classes, int n_cols, const int32_t *layout,
                       int n_out) {
    uint8_t hdr[100];
    sqlite3_int64 size;
    memset(r, 0, sizeof *r);
    r->sound = 1;
    r->classes = classes;
    r->n_cols = n_cols;
    r->layout = layout;
    r->n_out = n_out;
    r->max_field = -1;
    for (int c = 0; layout && c < n_out; c++)
        if (layout[c] > r->max_field) r->max_field = layout[c];
    if (r->max_field >= MAX_FIELDS) r->layout = NULL; /* the scan's columns too far into the records: SQLite reads */
    for (int f = 0; f < MAX_FIELDS; f++) r->fast[f] = FAST[f < n_cols ? classes[f] & COL_CLASS : COL_CLASS + 1];
    if (file_of(db, &r->fp, hdr, &size)) return 1;
    /* + 8: record() reads 8 bytes at a time */
    r->run = malloc((size_t)(RUN_PAGES * pl->page_size) + 8);
    r->overflow = malloc((size_t)pl->page_size);
    return !r->run || !r->overflow || checker_init(&r->c, pl, r->page_why) ? -1 : 0;
}

static void leaves_free(leaves *r) {
    checker_free(&r->c);
    free(r->run);
    free(r->overflow);
}

/* Back to nothing reduced (the page reader gave the range back to SQLite). */
static void reset(nsa_result *r, int64_t n_keys) {
    size_t keys = (size_t)(n_keys ? n_keys : 1);
    r->selected.n = r->marked.n = r->keyed.n = 0;
    memset(r->problems, 0, sizeof r->problems);
    r->counted = r->mismatch_rows = r->rows = r->page_rows = 0;
    free(r->spans); /* as if new: the spans' order is their table's */
    r->spans = NULL;
    r->span_cap = r->span_n = 0;
    memset(&r->null_span, 0, sizeof r->null_span);
    memset(r->key_rows, 0, keys * sizeof(int64_t));
    memset(r->key_first_name, 0, keys * sizeof(int64_t));
    memset(r->key_first_null, 0, keys);
    r->n_groups = 0; /* SQLite reads the run: no group's bounds known */
}

static nsa_result *nsa_scan(const char *uri, const char *sql, int64_t lo, int64_t hi, const int64_t *w_gtid,
                     const int64_t *w_start, const int64_t *w_end, int64_t n_win, const int64_t *strings,
                     int64_t n_strings, int check_strings, const int64_t *marked, int64_t n_marked,
                     const int64_t *counted, int64_t n_counted, const int64_t *key_gpid, const int64_t *key_corr,
                     int64_t n_keys, plan_t *plan, int64_t first, int64_t last, const uint8_t *classes, int n_cols,
                     const int32_t *layout, const int64_t *want_gpid, const int64_t *want_corr, int64_t n_want) {
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
    const char *unsorted = !keys_sorted(key_gpid, key_corr, n_keys)    ? "allocation"
                           : !keys_sorted(want_gpid, want_corr, n_want) ? "wanted"
                                                                        : NULL;
    if (unsorted) {
        snprintf(r->error, sizeof r->error, "%s keys not sorted by (correlation id, gpid) and unique", unsorted);
        goto done;
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
    x.n_want = n_want;
    x.want_gpid = want_gpid;
    x.want_corr = want_corr;
    if (idset_init(&x.strings, strings, n_strings) || idset_init(&x.marked, marked, n_marked) ||
        idset_init(&x.counted, counted, n_counted) || idset_init(&x.key_corrs, key_corr, n_keys) ||
        idset_init(&x.want_corrs, want_corr, n_want)) {
        snprintf(r->error, sizeof r->error, "out of memory");
        goto done;
    }
    /* With a plan, leaves [first, last) are read and checked here; ``layout`` (where each column of
     * the SELECT lies in the table's records) says the page reader may reduce their rows. It reduces
     * the whole run, or gives it all back to SQLite (rowids lo..hi: the run's) and checks on. */
    if (plan) {
        leaves lr;
        int64_t groups = (last - first + CORR_GROUP - 1) / CORR_GROUP;
        r->corr_lo = calloc((size_t)(groups ? groups : 1), sizeof(int64_t));
        r->corr_hi = calloc((size_t)(groups ? groups : 1), sizeof(int64_t));
        r->corr_seen = calloc((size_t)(groups ? groups : 1), 1);
        if (!r->corr_lo || !r->corr_hi || !r->corr_seen) {
            snprintf(r->error, sizeof r->error, "out of memory");
            goto done;
        }
        r->n_groups = groups;
        x.leaf = &lr.leaf;
        x.first_leaf = first;
        int rc = leaves_init(&lr, plan, db, classes, n_cols, layout, NCOL);
        if (rc < 0) {
            leaves_free(&lr);
            snprintf(r->error, sizeof r->error, "out of memory");
            goto done;
        }
        if (rc > 0) {
            doubt(&lr, 0, "the file cannot be read through its handle");
            rc = hand_over(&lr, 0, "the file cannot be read through its handle");
        } else {
            rc = read_leaves(&lr, scan_row, &x, first, last);
        }
        if (rc == PAGE_FAILED || x.failed) {
            leaves_free(&lr);
            snprintf(r->error, sizeof r->error, "out of memory");
            goto done;
        }
        snprintf(r->check, sizeof r->check, "%s", lr.sound ? "" : lr.why);
        snprintf(r->handover, sizeof r->handover, "%s", rc == PAGE_OK ? "" : lr.layout ? lr.handover : "no page layout");
        int read = rc == PAGE_OK;
        leaves_free(&lr);
        if (read) goto done;
        reset(r, n_keys);
    }
    r->handovers = 1; /* SQLite reads the range (no page reader, or it gave the range back) */
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
    free(x.want_corrs.bits);
    return r;
}

static void nsa_free(nsa_result *r) {
    if (!r) return;
    free(r->selected.values);
    free(r->selected.nulls);
    free(r->marked.values);
    free(r->marked.nulls);
    free(r->keyed.values);
    free(r->keyed.nulls);
    free(r->spans);
    free(r->key_rows);
    free(r->key_first_name);
    free(r->key_first_null);
    free(r->corr_lo);
    free(r->corr_hi);
    free(r->corr_seen);
    free(r);
}

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
static nsa_table *nsa_read(const char *uri, const char *sql, int ncol, int collect) {
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

static void nsa_table_free(nsa_table *t) {
    if (!t) return;
    free(t->values);
    free(t->nulls);
    free(t);
}

/* --- a run of a table's leaves read as integer columns (the GPU tables, the host stalls) ---------
 * The same page reader and check as the scan's, the rows gathered into an nsa_table. With windows,
 * only the rows the host stalls' reduction can use are kept (nsysaudit/read/gpu_work.py's _reduce
 * keeps no other): a row is left out only where its start and end are known, inside the capture's
 * bounds, and it overlaps no window of its process (or has no process). Every other row, one with a
 * NULL start, say, is kept for the Python side to judge as it judges every row SQLite reads. With
 * keys, only the rows whose key column holds one of them (the CUDA API rows of some correlation ids). */

/* With a reduction (the host stalls' _reduce, nsysaudit/read/gpu_work.py), a kept row that the Python
 * side would only add up is added up here instead, and not returned: a row with its start, end, process
 * and stream known, inside the capture, its end not before its start, overlapping a window (a span of
 * stalls) of its process and no span of the attributed calls (those rows are paired one by one: they
 * are returned). Per (stall, stream): the rows overlapping the stall (start < b, end > a) and the sum
 * of their parts inside it (_sums' numbers); and the union of the rows' [start, end] as disjoint
 * pieces per process (_merge's: touching intervals are one). */

/* The last answer of window_after for one process: its windows [first, end), and w. */
typedef struct {
    int64_t g, first, end, w;
    int valid;
} hint;

/* The last answers for a few processes (slot by the process's hash): the rows of several processes
 * come interleaved, and one hint for all of them would be lost at every change of process. */
#define N_HINTS 16
typedef struct {
    hint h[N_HINTS];
} hints;

typedef struct taker taker;

struct taker {
    nsa_table *t;
    const int64_t *w_gpid, *w_start, *w_end; /* the windows, sorted by (gpid, w_end), disjoint per gpid */
    int64_t n_win, lo, hi;                   /* the capture's bounds (has_lo, has_hi: recorded) */
    int has_lo, has_hi, filter;              /* filter: windows given */
    int c_gpid, c_start, c_end;              /* the columns holding them */
    idset keys;                              /* by_key: the values of column c_key a row is kept for */
    int by_key, c_key;
    int64_t visited;                         /* rows decoded, kept or not */
    struct reducer *red;                     /* with a reduction (below): the rows it adds up */
    hints win_hints;
};

typedef struct {
    int64_t s, e;
    int64_t g; /* the process's rank among the windows' processes */
} piece;

typedef struct {
    int64_t call, stream, rows, busy;
} sumslot; /* call -1: free */

typedef struct reducer {
    const int64_t *span_off;        /* per window: its stalls [span_off[j], span_off[j + 1]) */
    const int64_t *call, *a, *b;    /* the stalls, by window, each window's by start */
    const int64_t *reach;           /* per stall: the largest b of its window's stalls up to it */
    const int64_t *t_gpid, *t_start, *t_end; /* the attributed calls' spans, sorted by (gpid, end) */
    int64_t n_top;
    hints top_hints;
    int64_t *rank;                  /* per window: its process's rank */
    int c_stream;
    sumslot *slots;
    int64_t cap, n;
    piece *pieces, *spare;
    int64_t n_pieces, cap_pieces;
    int64_t reduced;                /* rows added up here */
    int overflow;                   /* a sum past 2^63 - 1: the Python side reduces instead */
} reducer;

/* The first window of (g, w_end sorted) arrays ending after s, or g's windows' end; first: g's first
 * window. Rows come mostly in time order: from g's last answer (hs) the search gallops forward (or
 * searches the windows before it), else it searches the whole array. The answer is the same either way:
 * the first of g's windows whose end is after s. */
static int64_t window_after(const int64_t *gpid, const int64_t *w_end, int64_t n, int64_t g, int64_t s,
                            int64_t *first, hints *hs) {
    hint *h = &hs->h[mix((uint64_t)g) & (N_HINTS - 1)];
    int64_t lo, hi;
    if (h->valid && h->g == g) {
        int64_t a = h->first, z = h->end, w = h->w;
        *first = a;
        if (w == a || w_end[w - 1] <= s) { /* at w or after: every window before lo ends by s */
            lo = w;
            hi = z;
            for (int64_t step = 1; lo < z; step <<= 1) {
                int64_t probe = lo + step - 1 < z ? lo + step - 1 : z - 1;
                if (w_end[probe] > s) {
                    hi = probe;
                    break;
                }
                lo = probe + 1;
            }
        } else { /* before w: window w - 1 ends after s */
            lo = a;
            hi = w - 1;
        }
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (w_end[mid] <= s) lo = mid + 1;
            else hi = mid;
        }
        return h->w = lo;
    }
    lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (gpid[mid] < g) lo = mid + 1;
        else hi = mid;
    }
    int64_t a = lo, z = lo;
    hi = n;
    while (z < hi) { /* the end of g's windows */
        int64_t mid = z + (hi - z) / 2;
        if (gpid[mid] <= g) z = mid + 1;
        else hi = mid;
    }
    hi = z;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (w_end[mid] <= s) lo = mid + 1;
        else hi = mid;
    }
    *h = (hint){g, a, z, lo, 1};
    *first = a;
    return lo;
}

static int add_sum(reducer *d, int64_t call, int64_t stream, int64_t busy) {
    if (d->n * 2 >= d->cap) {
        int64_t cap = d->cap ? d->cap * 2 : 1024;
        sumslot *grown = malloc((size_t)cap * sizeof(sumslot));
        if (!grown) return -1;
        for (int64_t i = 0; i < cap; i++) grown[i].call = -1;
        for (int64_t i = 0; i < d->cap; i++) {
            if (d->slots[i].call < 0) continue;
            uint64_t h = mix((uint64_t)d->slots[i].call * 0x9e3779b97f4a7c15ULL ^ (uint64_t)d->slots[i].stream) &
                         (uint64_t)(cap - 1);
            while (grown[h].call >= 0) h = (h + 1) & (uint64_t)(cap - 1);
            grown[h] = d->slots[i];
        }
        free(d->slots);
        d->slots = grown;
        d->cap = cap;
    }
    uint64_t h = mix((uint64_t)call * 0x9e3779b97f4a7c15ULL ^ (uint64_t)stream) & (uint64_t)(d->cap - 1);
    while (d->slots[h].call >= 0 && (d->slots[h].call != call || d->slots[h].stream != stream))
        h = (h + 1) & (uint64_t)(d->cap - 1);
    sumslot *t = &d->slots[h];
    if (t->call < 0) {
        t->call = call, t->stream = stream, t->rows = 0, t->busy = 0;
        d->n++;
    }
    t->rows++;
    if (__builtin_add_overflow(t->busy, busy, &t->busy)) d->overflow = 1;
    return 0;
}

/* The row [s, e] of process g, stream st (window w: the first of g's ending after s) added up. */
static int reduce_kept(reducer *d, const taker *k, int64_t w, int64_t g, int64_t st, int64_t s, int64_t e) {
    for (int64_t j = w; j < k->n_win && k->w_gpid[j] == g && k->w_start[j] < e; j++) {
        int64_t i = d->span_off[j], hi = d->span_off[j + 1];
        while (i < hi) { /* the window's first stall ending after s: none before it does */
            int64_t mid = i + (hi - i) / 2;
            if (d->reach[mid] <= s) i = mid + 1;
            else hi = mid;
        }
        for (; i < d->span_off[j + 1] && d->a[i] < e; i++)
            if (d->b[i] > s && add_sum(d, d->call[i], st, (e < d->b[i] ? e : d->b[i]) - (s > d->a[i] ? s : d->a[i])))
                return -1;
    }
    int64_t r = d->rank[w];
    piece *last = d->n_pieces ? &d->pieces[d->n_pieces - 1] : NULL;
    if (last && last->g == r && s <= last->e && e >= last->s) { /* one interval with the last: merged now */
        if (s < last->s) last->s = s;
        if (e > last->e) last->e = e;
    } else {
        if (d->n_pieces == d->cap_pieces) {
            int64_t cap = d->cap_pieces ? d->cap_pieces * 2 : 4096;
            piece *grown = realloc(d->pieces, (size_t)cap * sizeof(piece));
            if (!grown) return -1;
            d->pieces = grown;
            d->cap_pieces = cap;
        }
        d->pieces[d->n_pieces++] = (piece){s, e, r};
    }
    d->reduced++;
    return 0;
}

/* One stable counting pass of n pieces from src to dst by the digit (key >> shift) & mask, key the
 * start less lo (by_rank: the rank instead). */
static void radix_pass(const piece *src, piece *dst, int64_t n, int64_t lo, int shift, uint64_t mask, int by_rank,
                       int64_t *count) {
    memset(count, 0, (size_t)(mask + 2) * sizeof(int64_t));
#define DIGIT(p) ((by_rank ? (uint64_t)(p).g : ((uint64_t)(p).s - (uint64_t)lo) >> shift) & mask)
    for (int64_t i = 0; i < n; i++) count[DIGIT(src[i]) + 1]++;
    for (uint64_t b = 1; b <= mask + 1; b++) count[b] += count[b - 1];
    for (int64_t i = 0; i < n; i++) dst[count[DIGIT(src[i])]++] = src[i];
#undef DIGIT
}

/* The pieces sorted by (rank, start) (an LSD radix sort, unless they are in order already) and merged
 * into disjoint intervals per rank (ranks 1 .. n_ranks), in place: returns nonzero when out of memory. */
static int merge_pieces(reducer *d, int64_t n_ranks) {
    piece *p = d->pieces;
    int64_t n = d->n_pieces, sorted = 1, lo = n ? p[0].s : 0, hi = lo;
    for (int64_t i = 0; i < n; i++) {
        if (i && (p[i].g < p[i - 1].g || (p[i].g == p[i - 1].g && p[i].s < p[i - 1].s))) sorted = 0;
        if (p[i].s < lo) lo = p[i].s;
        if (p[i].s > hi) hi = p[i].s;
    }
    if (!sorted) {
        int64_t *count = malloc(((size_t)1 << 12) * sizeof(int64_t) + (size_t)(n_ranks + 2) * sizeof(int64_t));
        piece *tmp = malloc((size_t)n * sizeof(piece));
        if (!count || !tmp) {
            free(count);
            free(tmp);
            return -1;
        }
        uint64_t range = (uint64_t)hi - (uint64_t)lo;
        piece *src = p, *dst = tmp;
        for (int shift = 0; shift < 64 && (shift == 0 || (range >> shift) != 0); shift += 11) {
            radix_pass(src, dst, n, lo, shift, 0x7ff, 0, count);
            piece *t = src;
            src = dst, dst = t;
        }
        if (n_ranks > 1) { /* ranks 1 .. n_ranks */
            uint64_t mask = 1;
            while (mask < (uint64_t)n_ranks) mask = mask << 1 | 1;
            int64_t *big = mask + 2 > ((uint64_t)1 << 12) ? malloc((size_t)(mask + 2) * sizeof(int64_t)) : count;
            if (!big) {
                free(count);
                free(tmp);
                return -1;
            }
            radix_pass(src, dst, n, lo, 0, mask, 1, big);
            if (big != count) free(big);
            piece *t = src;
            src = dst, dst = t;
        }
        if (src != p) memcpy(p, src, (size_t)n * sizeof(piece));
        free(count);
        free(tmp);
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m && p[m - 1].g == p[i].g && p[i].s <= p[m - 1].e) {
            if (p[i].e > p[m - 1].e) p[m - 1].e = p[i].e;
        } else {
            p[m++] = p[i];
        }
    }
    d->n_pieces = m;
    return 0;
}


/* Whether a row with known start s and end e of process g overlaps one of its windows: the first
 * window ending after s starts before e (gpu_work._inside's rule). */
static int inside(taker *k, int64_t g, int64_t s, int64_t e, int64_t *w) {
    int64_t first;
    int64_t lo = *w = window_after(k->w_gpid, k->w_end, k->n_win, g, s, &first, &k->win_hints);
    return lo >= first && lo < k->n_win && k->w_gpid[lo] == g && k->w_start[lo] < e;
}

/* Whether the row overlaps a span of the attributed calls (the reducer's; gpu_work._inside's rule). */
static int near_top(reducer *d, int64_t g, int64_t s, int64_t e) {
    int64_t first, lo = window_after(d->t_gpid, d->t_end, d->n_top, g, s, &first, &d->top_hints);
    return lo >= first && lo < d->n_top && d->t_gpid[lo] == g && d->t_start[lo] < e;
}

static int take_row(void *arg, const int64_t *v, uint8_t nulls, uint8_t wrong) {
    taker *k = arg;
    nsa_table *t = k->t;
    k->visited++;
    t->mismatched += wrong;
    if (k->by_key && (((nulls >> k->c_key) & 1) || !idset_has(&k->keys, v[k->c_key]))) return 0;
    if (k->filter && !(nulls & (1 << k->c_start)) && !(nulls & (1 << k->c_end))) {
        int64_t s = v[k->c_start], e = v[k->c_end], w;
        int out = (k->has_lo && (s < k->lo || e < k->lo)) || (k->has_hi && (s > k->hi || e > k->hi));
        if (!out && ((nulls & (1 << k->c_gpid)) || !inside(k, v[k->c_gpid], s, e, &w))) return 0;
        reducer *d = k->red;
        if (d && !out && e >= s && !(nulls & (1 << d->c_stream)) && !near_top(d, v[k->c_gpid], s, e))
            return reduce_kept(d, k, w, v[k->c_gpid], v[d->c_stream], s, e);
    }
    if (table_grow(t)) return -1;
    int64_t *to = t->values + t->n * t->ncol;
    uint8_t *z = t->nulls + t->n * t->ncol;
    for (int c = 0; c < t->ncol; c++) {
        to[c] = v[c];
        z[c] = (uint8_t)((nulls >> c) & 1);
    }
    t->n++;
    return 0;
}

/* Leaves [first, last) of plan read into a table of layout's n_out columns. *rc: PAGE_OK (every
 * row read, the check sound), else the rows are SQLite's to read (handover says why); PAGE_FAILED:
 * out of memory. */
static nsa_table *nsa_read_pages(const char *uri, plan_t *plan, int64_t first, int64_t last, const uint8_t *classes,
                                 int n_cols, const int32_t *layout, int n_out, taker *k, int *rc, char *handover,
                                 char *check) {
    nsa_table *t = calloc(1, sizeof(nsa_table));
    if (!t) return NULL;
    t->ncol = n_out;
    k->t = t;
    sqlite3 *db = NULL;
    *rc = PAGE_FAILED;
    handover[0] = 0;
    snprintf(check, 200, "the run's leaves not read");
    if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(t->error, sizeof t->error, "open: %s", db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return t;
    }
    leaves lr;
    int init = leaves_init(&lr, plan, db, classes, n_cols, layout, n_out);
    if (init < 0) {
        snprintf(t->error, sizeof t->error, "out of memory");
    } else {
        *rc = init > 0 ? hand_over(&lr, 0, "the file cannot be read through its handle")
                       : read_leaves(&lr, take_row, k, first, last);
        if (*rc == PAGE_FAILED) snprintf(t->error, sizeof t->error, "out of memory");
        else if (*rc == PAGE_OK && !lr.sound) { /* a doubt: the rows are SQLite's */
            *rc = PAGE_HANDOVER;
            memcpy(lr.handover, lr.why, sizeof lr.handover);
        }
        if (*rc == PAGE_HANDOVER) snprintf(handover, 200, "%s", lr.layout ? lr.handover : "no page layout");
        /* the check of every leaf of the run, whoever reads its rows (read_leaves checks on past a
         * handover while it is sound): what the damage check of the table is handed */
        if (init > 0) snprintf(check, 200, "the file cannot be read through its handle");
        else if (*rc != PAGE_FAILED) snprintf(check, 200, "%s", lr.sound ? "" : lr.why);
    }
    leaves_free(&lr);
    sqlite3_close(db);
    return t;
}

/* --- the Python module: nsysaudit.read._native (types in nsysaudit/read/_native.pyi) --------- */

/* The module's interface version: nsysaudit/read/native.py uses a build only of its own version
 * (a stale build from another scan.c is not called). */
#define NSA_ABI 8

static PyObject *NativeError; /* _native.Error: the scan or the read could not be done */

/* ``obj`` as a contiguous int64 buffer (array.array('q'), a numpy int64 array, ...): 0, or -1
 * with a TypeError naming ``what``. */
static int int64_buffer(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || (*f == '<' && PY_LITTLE_ENDIAN)) f++;
    if (view->itemsize != 8 || view->ndim > 1 || (strcmp(f, "q") != 0 && strcmp(f, "l") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous buffer of int64, got format '%s' (%zd-byte items)",
                     what, view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *int_or_none(int present, int64_t value) {
    if (!present) Py_RETURN_NONE;
    return PyLong_FromLongLong(value);
}

/* The spans as (gpid, first_ns, last_ns, rows) tuples, None where unknown (NULL gpid last). */
static PyObject *spans_list(const nsa_result *r) {
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (int64_t i = 0; i <= r->span_cap; i++) {
        const span *s = i < r->span_cap ? &r->spans[i] : &r->null_span;
        if (i < r->span_cap ? !s->used : s->rows == 0) continue;
        int64_t last = s->has_end && s->has_start ? (s->max_end > s->max_start ? s->max_end : s->max_start)
                       : s->has_end               ? s->max_end
                                                  : s->max_start;
        PyObject *item = Py_BuildValue("(NNNL)", int_or_none(i < r->span_cap, s->gpid),
                                       int_or_none(s->has_start, s->min_start),
                                       int_or_none(s->has_end || s->has_start, last), (long long)s->rows);
        if (!item || PyList_Append(list, item)) {
            Py_XDECREF(item);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(item);
    }
    return list;
}

/* Bytes of ``p`` (never None: an empty buffer, never allocated, is b""). */
static const char *bytes_of(const void *p) { return p ? (const char *)p : ""; }

static PyObject *rows_tuple(const rowbuf *b) {
    return Py_BuildValue("(y#y#L)", bytes_of(b->values), (Py_ssize_t)(b->n * NCOL * 8), bytes_of(b->nulls),
                         (Py_ssize_t)b->n, (long long)b->n);
}

/* The scan's int64 arguments, in order. */
#define N_BUFFERS 8
static const char *const BUFFER_NAMES[N_BUFFERS] = {"w_gtid",  "w_start", "w_end",    "strings",
                                                    "marked", "counted", "key_gpid", "key_corr"};

/* _native.Plan: a table's plan (plan_table), shared by the threads that read its runs of leaves. */
typedef struct {
    PyObject_HEAD
    plan_t *plan;
} PlanObject;

static void plan_dealloc(PlanObject *self) {
    plan_free(self->plan);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *plan_why(PlanObject *self, void *unused) {
    (void)unused;
    return PyUnicode_FromString(self->plan->why);
}

static PyObject *plan_leaves(PlanObject *self, void *unused) {
    (void)unused;
    return PyLong_FromLongLong(self->plan->n_leaves);
}

/* The leaves in n runs of (nearly) as many each: (first, last, lo, hi) per run, leaves [first, last)
 * holding rowids lo..hi; together every rowid once. */
static PyObject *plan_runs(PlanObject *self, PyObject *arg) {
    const plan_t *pl = self->plan;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 1 || pl->why[0] || pl->n_leaves < 1) {
        PyErr_SetString(PyExc_ValueError, "runs: at least one, of a sound plan");
        return NULL;
    }
    PyObject *list = PyList_New(0);
    for (int64_t j = 0; list && j < n; j++) {
        int64_t first = j * pl->n_leaves / n, last = (j + 1) * pl->n_leaves / n;
        if (first == last) continue;
        PyObject *run = Py_BuildValue("(LLLL)", (long long)first, (long long)last,
                                      (long long)(first == 0 ? INT64_MIN : pl->upper[first - 1] + 1),
                                      (long long)(last == pl->n_leaves ? INT64_MAX : pl->upper[last - 1]));
        if (!run || PyList_Append(list, run)) Py_CLEAR(list);
        Py_XDECREF(run);
    }
    return list;
}

static PyGetSetDef plan_attributes[] = {
    {"why", (getter)plan_why, NULL, "\"\" when the header and the interior pages are sound, else why not", NULL},
    {"leaves", (getter)plan_leaves, NULL, "how many leaves the table has", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef plan_methods[] = {
    {"runs", (PyCFunction)plan_runs, METH_O, "The leaves in n runs: (first, last, lo, hi) each."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nsysaudit.read._native.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A table's b-tree: its interior pages checked, its leaves in key order (see native/scan.c).",
    .tp_getset = plan_attributes,
    .tp_methods = plan_methods,
};

static int open_readonly(const char *uri, sqlite3 **db) {
    if (sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK)
        return 0;
    PyErr_Format(NativeError, "open: %s", *db ? sqlite3_errmsg(*db) : "out of memory");
    sqlite3_close(*db);
    return -1;
}

static PyObject *py_plan(PyObject *self, PyObject *args) {
    (void)self;
    const char *uri, *table;
    sqlite3 *db = NULL;
    if (!PyArg_ParseTuple(args, "ss:plan", &uri, &table) || open_readonly(uri, &db)) return NULL;
    plan_t *pl;
    Py_BEGIN_ALLOW_THREADS
    pl = plan_table(db, table);
    sqlite3_close(db);
    Py_END_ALLOW_THREADS
    if (!pl) return PyErr_NoMemory();
    PlanObject *out = PyObject_New(PlanObject, &PlanType);
    if (!out) {
        plan_free(pl);
        return NULL;
    }
    out->plan = pl;
    return (PyObject *)out;
}

/* One table's check without reading its rows, on connection db: "" into why when it is sound, else
 * why the check is unsure. PAGE_FAILED when out of memory. */
static int check_one(sqlite3 *db, const char *table, const uint8_t *classes, int n_cols, char *why) {
    plan_t *pl = plan_table(db, table);
    int rc = PAGE_OK;
    why[0] = 0;
    if (!pl) return PAGE_FAILED;
    if (pl->why[0]) {
        snprintf(why, 200, "%s", pl->why);
    } else {
        leaves lr;
        rc = leaves_init(&lr, pl, db, classes, n_cols, NULL, 0);
        if (rc == 0) rc = read_leaves(&lr, NULL, NULL, 0, pl->n_leaves);
        else if (rc > 0) doubt(&lr, 0, "the file cannot be read through its handle");
        if (rc != PAGE_FAILED && !lr.sound) snprintf(why, 200, "%s", lr.why);
        leaves_free(&lr);
    }
    plan_free(pl);
    return rc == PAGE_FAILED ? PAGE_FAILED : PAGE_OK;
}

/* The tables' checks without reading their rows (the tables the scan does not read), on one
 * connection: per (table, classes), "" when it is sound, else why the check is unsure. */
static PyObject *py_check(PyObject *self, PyObject *args) {
    (void)self;
    const char *uri;
    PyObject *given;
    sqlite3 *db = NULL;
    if (!PyArg_ParseTuple(args, "sO:check", &uri, &given)) return NULL;
    PyObject *seq = PySequence_Fast(given, "check: expected a sequence of (table, classes)");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **names = calloc((size_t)n + 1, sizeof(char *));
    const char **classes = calloc((size_t)n + 1, sizeof(char *));
    Py_ssize_t *widths = calloc((size_t)n + 1, sizeof(Py_ssize_t));
    char(*whys)[200] = calloc((size_t)n + 1, 200);
    PyObject *out = NULL;
    if (!names || !classes || !widths || !whys) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* the strings and bytes live in seq while the GIL is released */
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *name, *cls;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyUnicode_Check(name = PyTuple_GET_ITEM(item, 0)) ||
            !PyBytes_Check(cls = PyTuple_GET_ITEM(item, 1))) {
            PyErr_SetString(PyExc_TypeError, "check: expected a sequence of (table, classes)");
            goto done;
        }
        if (!(names[i] = PyUnicode_AsUTF8(name))) goto done;
        classes[i] = PyBytes_AS_STRING(cls);
        widths[i] = PyBytes_GET_SIZE(cls);
    }
    if (open_readonly(uri, &db)) goto done;
    int rc = PAGE_OK;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && rc == PAGE_OK; i++)
        rc = check_one(db, names[i], (const uint8_t *)classes[i], (int)widths[i], whys[i]);
    sqlite3_close(db);
    Py_END_ALLOW_THREADS
    if (rc == PAGE_FAILED) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *why = PyUnicode_FromString(whys[i]);
        if (!why) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, why);
    }
done:
    free(names);
    free(classes);
    free(widths);
    free(whys);
    Py_DECREF(seq);
    return out;
}

static PyObject *py_scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"uri", "sql", "lo", "hi", "w_gtid", "w_start", "w_end", "strings", "check_strings",
                               "marked", "counted", "key_gpid", "key_corr", "plan", "first", "last", "classes",
                               "layout", "want_gpid", "want_corr", NULL};
    const char *uri, *sql;
    long long lo, hi, first = 0, last = 0;
    int check_strings;
    PyObject *objects[N_BUFFERS + 2], *layout_obj = Py_None, *plan_obj = Py_None;
    Py_buffer classes = {0};
    objects[N_BUFFERS] = objects[N_BUFFERS + 1] = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ssLLOOOOpOOOO|OLLy*OOO:scan", keywords, &uri, &sql, &lo, &hi,
                                     &objects[0], &objects[1], &objects[2], &objects[3], &check_strings,
                                     &objects[4], &objects[5], &objects[6], &objects[7], &plan_obj, &first, &last,
                                     &classes, &layout_obj, &objects[N_BUFFERS], &objects[N_BUFFERS + 1]))
        return NULL;
    int n_objects = objects[N_BUFFERS] && objects[N_BUFFERS] != Py_None ? N_BUFFERS + 2 : N_BUFFERS;
    plan_t *plan = NULL;
    PyObject *out = NULL;
    int32_t layout[NCOL];
    int has_layout = layout_obj != Py_None;
    if (plan_obj != Py_None) {
        if (!PyObject_TypeCheck(plan_obj, &PlanType)) {
            PyErr_SetString(PyExc_TypeError, "plan: expected a Plan (or None)");
            goto parsed;
        }
        plan = ((PlanObject *)plan_obj)->plan;
        if (plan->why[0] || first < 0 || last > plan->n_leaves || first >= last || !classes.buf) {
            PyErr_SetString(PyExc_ValueError, "plan: a sound plan, a run of its leaves and the columns' classes");
            goto parsed;
        }
    }
    if (has_layout) {
        PyObject *seq = PySequence_Fast(layout_obj, "layout: expected a sequence of 6 ints");
        if (!seq) goto parsed;
        int bad = PySequence_Fast_GET_SIZE(seq) != NCOL;
        for (int c = 0; c < NCOL && !bad; c++) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, c));
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                goto parsed;
            }
            bad = v < -1 || v > INT32_MAX;
            layout[c] = (int32_t)v;
        }
        Py_DECREF(seq);
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "layout: expected 6 field numbers (-1: a column the table lacks)");
            goto parsed;
        }
    }
    Py_buffer views[N_BUFFERS + 2];
    int held = 0;
    for (; held < n_objects; held++)
        if (int64_buffer(objects[held], &views[held],
                         held < N_BUFFERS ? BUFFER_NAMES[held] : held == N_BUFFERS ? "want_gpid" : "want_corr"))
            goto release;
    int64_t n_win = views[0].len / 8, n_keys = views[6].len / 8;
    int64_t n_want = n_objects > N_BUFFERS ? views[N_BUFFERS].len / 8 : 0;
    if (views[1].len / 8 != n_win || views[2].len / 8 != n_win || views[7].len / 8 != n_keys ||
        (n_objects > N_BUFFERS && views[N_BUFFERS + 1].len / 8 != n_want)) {
        PyErr_SetString(PyExc_ValueError, "the windows' (or the keys') arrays differ in length");
        goto release;
    }
    nsa_result *r;
    Py_BEGIN_ALLOW_THREADS
    r = nsa_scan(uri, sql, lo, hi, views[0].buf, views[1].buf, views[2].buf, n_win, views[3].buf, views[3].len / 8,
                 check_strings, views[4].buf, views[4].len / 8, views[5].buf, views[5].len / 8, views[6].buf,
                 views[7].buf, n_keys, plan, first, last, classes.buf, (int)classes.len, has_layout ? layout : NULL,
                 n_want ? views[N_BUFFERS].buf : NULL, n_want ? views[N_BUFFERS + 1].buf : NULL, n_want);
    Py_END_ALLOW_THREADS
    if (!r) {
        PyErr_NoMemory();
        goto release;
    }
    if (r->error[0]) {
        PyErr_SetString(NativeError, r->error);
    } else {
        size_t keys = (size_t)n_keys * 8;
        out = Py_BuildValue(
            "{sLsLsLsLsLsssssNsNsNsNsy#sy#sy#sy#sy#sy#s(LLLLLLL)}", "rows", (long long)r->rows, "mismatch_rows",
            (long long)r->mismatch_rows, "counted", (long long)r->counted, "page_rows", (long long)r->page_rows,
            "handovers", (long long)r->handovers, "handover", r->handover, "check", r->check, "selected",
            rows_tuple(&r->selected), "marked", rows_tuple(&r->marked), "keyed", rows_tuple(&r->keyed), "spans", spans_list(r),
            "key_rows", (const char *)r->key_rows, (Py_ssize_t)keys, "key_first_name",
            (const char *)r->key_first_name, (Py_ssize_t)keys, "key_first_null", (const char *)r->key_first_null,
            (Py_ssize_t)n_keys, "corr_lo", (const char *)bytes_of(r->corr_lo), (Py_ssize_t)(r->n_groups * 8),
            "corr_hi", (const char *)bytes_of(r->corr_hi), (Py_ssize_t)(r->n_groups * 8), "corr_seen",
            (const char *)bytes_of(r->corr_seen), (Py_ssize_t)r->n_groups, "problems", (long long)r->problems[0], (long long)r->problems[1],
            (long long)r->problems[2], (long long)r->problems[3], (long long)r->problems[4],
            (long long)r->problems[5], (long long)r->problems[6]);
    }
    nsa_free(r);
release:
    while (held > 0) PyBuffer_Release(&views[--held]);
parsed:
    if (classes.buf) PyBuffer_Release(&classes);
    return out;
}

static PyObject *py_read(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"uri", "sql", "ncol", "collect", NULL};
    const char *uri, *sql;
    int ncol, collect;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ssip:read", keywords, &uri, &sql, &ncol, &collect)) return NULL;
    if (ncol < 1 || ncol > 64) {
        PyErr_SetString(PyExc_ValueError, "ncol: expected 1 to 64 columns");
        return NULL;
    }
    nsa_table *t;
    Py_BEGIN_ALLOW_THREADS
    t = nsa_read(uri, sql, ncol, collect);
    Py_END_ALLOW_THREADS
    if (!t) return PyErr_NoMemory();
    PyObject *out = NULL;
    if (t->error[0]) PyErr_SetString(NativeError, t->error);
    else
        out = Py_BuildValue("(y#y#LL)", bytes_of(t->values), (Py_ssize_t)(t->n * ncol * 8), bytes_of(t->nulls),
                            (Py_ssize_t)(t->n * ncol), (long long)t->n, (long long)t->mismatched);
    nsa_table_free(t);
    return out;
}

/* The reduction's arrays (read_pages' reduce: span_off, call, a, b, reach, t_gpid, t_start, t_end, and
 * the stream's column), their views appended to views: 0, or -1 with an exception. */
#define N_REDUCE 8
static int reducer_views(PyObject *obj, Py_buffer *views, int *held, reducer *d, int64_t n_win, int n_out) {
    PyObject *items[N_REDUCE];
    int c_stream;
    if (!PyArg_ParseTuple(obj, "OOOOOOOOi:reduce", &items[0], &items[1], &items[2], &items[3], &items[4], &items[5],
                          &items[6], &items[7], &c_stream))
        return -1;
    int64_t len[N_REDUCE];
    for (int i = 0; i < N_REDUCE; i++) {
        if (int64_buffer(items[i], &views[*held], "reduce")) return -1;
        len[i] = views[(*held)++].len / 8;
    }
    const int64_t *off = views[*held - N_REDUCE].buf;
    int bad = len[0] != n_win + 1 || len[1] != len[2] || len[1] != len[3] || len[1] != len[4] || len[5] != len[6] ||
              len[5] != len[7] ||
              c_stream < 0 || c_stream >= n_out || off[0] != 0 || off[n_win] != len[1];
    for (int64_t j = 0; j < n_win && !bad; j++) bad = off[j + 1] < off[j];
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "reduce: offsets per window into the stalls, and the top spans");
        return -1;
    }
    const Py_buffer *v = views + *held - N_REDUCE;
    d->span_off = v[0].buf, d->call = v[1].buf, d->a = v[2].buf, d->b = v[3].buf, d->reach = v[4].buf;
    d->t_gpid = v[5].buf, d->t_start = v[6].buf, d->t_end = v[7].buf;
    d->n_top = len[5];
    d->c_stream = c_stream;
    return 0;
}

/* The reduction's sums: (call, stream, rows, busy) per row, int64 each, as bytes. */
static PyObject *sums_bytes(const reducer *d) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(d->n * 4 * 8));
    if (!b) return NULL;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(b);
    for (int64_t i = 0; i < d->cap; i++)
        if (d->slots[i].call >= 0) {
            memcpy(o, &d->slots[i], 4 * sizeof(int64_t));
            o += 4;
        }
    return b;
}

/* The reduction's merged pieces: (gpid, start, end) per row, int64 each, as bytes. */
static PyObject *pieces_bytes(const reducer *d, const int64_t *w_gpid) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(d->n_pieces * 3 * 8));
    if (!b) return NULL;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(b);
    /* a rank back to its process: the first window of each rank */
    int64_t j = 0;
    for (int64_t i = 0; i < d->n_pieces; i++) {
        while (d->rank[j] != d->pieces[i].g) j++; /* pieces sorted by rank, ranks ascending with j */
        o[3 * i] = w_gpid[j], o[3 * i + 1] = d->pieces[i].s, o[3 * i + 2] = d->pieces[i].e;
    }
    return b;
}

/* read_pages(uri, plan, first, last, classes, layout, w_gpid, w_start, w_end, bounds, columns, keys, key
 * column): (values, nulls, rows kept, values of another type (of every row visited), rows visited,
 * handover, check: "" when every leaf of the run is sound, else why the check is unsure). */
static PyObject *py_read_pages(PyObject *self, PyObject *args) {
    (void)self;
    const char *uri;
    long long first, last, lo, hi;
    int has_lo, has_hi, c_gpid, c_start, c_end, c_key;
    PyObject *plan_obj, *layout_obj, *objects[4], *reduce_obj = Py_None;
    Py_buffer classes = {0};
    if (!PyArg_ParseTuple(args, "sOLLy*OOOO(LpLp)(iii)Oi|O:read_pages", &uri, &plan_obj, &first, &last, &classes,
                          &layout_obj, &objects[0], &objects[1], &objects[2], &lo, &has_lo, &hi, &has_hi, &c_gpid,
                          &c_start, &c_end, &objects[3], &c_key, &reduce_obj))
        return NULL;
    PyObject *out = NULL;
    int32_t layout[NOUT];
    Py_buffer views[4 + N_REDUCE];
    taker k = {0};
    reducer d = {0};
    int held = 0, n_out = 0;
    if (!PyObject_TypeCheck(plan_obj, &PlanType)) {
        PyErr_SetString(PyExc_TypeError, "plan: expected a Plan");
        goto parsed;
    }
    plan_t *plan = ((PlanObject *)plan_obj)->plan;
    if (plan->why[0] || first < 0 || last > plan->n_leaves || first >= last) {
        PyErr_SetString(PyExc_ValueError, "plan: a sound plan and a run of its leaves");
        goto parsed;
    }
    PyObject *seq = PySequence_Fast(layout_obj, "layout: expected a sequence of ints");
    if (!seq) goto parsed;
    n_out = (int)PySequence_Fast_GET_SIZE(seq);
    int bad = n_out < 1 || n_out > NOUT;
    for (int c = 0; c < n_out && !bad; c++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, c));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            goto parsed;
        }
        bad = v < ROWID || v > INT32_MAX;
        layout[c] = (int32_t)v;
    }
    Py_DECREF(seq);
    if (bad || c_gpid < 0 || c_gpid >= n_out || c_start < 0 || c_start >= n_out || c_end < 0 || c_end >= n_out ||
        c_key < 0 || c_key >= n_out) {
        PyErr_SetString(PyExc_ValueError, "layout: 1 to 8 field numbers (-1: NULL, -2: the rowid), columns among them");
        goto parsed;
    }
    k.filter = objects[0] != Py_None;
    for (; k.filter && held < 3; held++)
        if (int64_buffer(objects[held], &views[held], "windows")) goto release;
    if (k.filter) {
        k.n_win = views[0].len / 8;
        if (views[1].len / 8 != k.n_win || views[2].len / 8 != k.n_win) {
            PyErr_SetString(PyExc_ValueError, "the windows' arrays differ in length");
            goto release;
        }
        k.w_gpid = views[0].buf, k.w_start = views[1].buf, k.w_end = views[2].buf;
    }
    k.by_key = objects[3] != Py_None;
    if (k.by_key) { /* sorted ascending, each once (native.py sorts them) */
        if (int64_buffer(objects[3], &views[held], "keys")) goto release;
        const int64_t *a = views[held].buf;
        int64_t n = views[held++].len / 8;
        for (int64_t i = 1; i < n; i++)
            if (a[i] <= a[i - 1]) {
                PyErr_SetString(PyExc_ValueError, "keys: expected ascending and unique");
                goto release;
            }
        if (idset_init(&k.keys, a, n)) {
            PyErr_NoMemory();
            goto release;
        }
        k.c_key = c_key;
    }
    k.lo = lo, k.hi = hi, k.has_lo = has_lo, k.has_hi = has_hi;
    k.c_gpid = c_gpid, k.c_start = c_start, k.c_end = c_end;
    int64_t n_ranks = 0;
    if (reduce_obj != Py_None) {
        if (!k.filter) {
            PyErr_SetString(PyExc_ValueError, "reduce: only with windows");
            goto release;
        }
        if (reducer_views(reduce_obj, views, &held, &d, k.n_win, n_out)) goto release;
        d.rank = malloc((size_t)(k.n_win ? k.n_win : 1) * sizeof(int64_t));
        if (!d.rank) {
            PyErr_NoMemory();
            goto release;
        }
        for (int64_t j = 0; j < k.n_win; j++) d.rank[j] = n_ranks += j == 0 || k.w_gpid[j] != k.w_gpid[j - 1];
        k.red = &d;
    }
    nsa_table *t;
    int rc, merged = 0;
    char handover[200], check[200];
    Py_BEGIN_ALLOW_THREADS
    t = nsa_read_pages(uri, plan, first, last, classes.buf, (int)classes.len, layout, n_out, &k, &rc, handover, check);
    if (t && !t->error[0] && rc == PAGE_OK && k.red) merged = merge_pieces(&d, n_ranks);
    Py_END_ALLOW_THREADS
    if (!t) {
        PyErr_NoMemory();
        goto release;
    }
    if (merged) snprintf(t->error, sizeof t->error, "out of memory");
    else if (d.overflow) snprintf(t->error, sizeof t->error, "a stall's sum past 2^63 - 1 ns");
    if (t->error[0]) PyErr_SetString(NativeError, t->error);
    else if (rc != PAGE_OK)
        out = Py_BuildValue("(y#y#LLLssNN)", "", (Py_ssize_t)0, "", (Py_ssize_t)0, 0LL, 0LL, (long long)k.visited,
                            handover, check, Py_NewRef(Py_None), Py_NewRef(Py_None));
    else
        out = Py_BuildValue("(y#y#LLLssNN)", bytes_of(t->values), (Py_ssize_t)(t->n * n_out * 8), bytes_of(t->nulls),
                            (Py_ssize_t)(t->n * n_out), (long long)t->n, (long long)t->mismatched,
                            (long long)k.visited, "", check, k.red ? sums_bytes(&d) : Py_NewRef(Py_None),
                            k.red ? pieces_bytes(&d, k.w_gpid) : Py_NewRef(Py_None));
    nsa_table_free(t);
release:
    free(d.slots);
    free(d.pieces);
    free(d.rank);
    free(k.keys.bits);
    while (held > 0) PyBuffer_Release(&views[--held]);
parsed:
    if (classes.buf) PyBuffer_Release(&classes);
    return out;
}

static PyObject *py_sqlite_version(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyUnicode_FromString(sqlite3_libversion());
}

static PyObject *py_sqlite_source_id(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyUnicode_FromString(sqlite3_sourceid());
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))py_scan, METH_VARARGS | METH_KEYWORDS,
     "Reduce one rowid range of the CUDA API table (see nsysaudit/read/native.py)."},
    {"plan", py_plan, METH_VARARGS, "A table's plan: its interior pages checked, its leaves listed."},
    {"check", py_check, METH_VARARGS, "Tables' checks, as quick_check's: \"\" when sound, else why unsure."},
    {"read", (PyCFunction)(void (*)(void))py_read, METH_VARARGS | METH_KEYWORDS,
     "The rows of a query of integer columns: (values, nulls, rows, values of another type)."},
    {"read_pages", py_read_pages, METH_VARARGS,
     "A run of a table's leaves as integer columns, read and checked by the page reader (see native.py)."},
    {"sqlite_version", py_sqlite_version, METH_NOARGS, "sqlite3_libversion() of the SQLite this module runs on."},
    {"sqlite_source_id", py_sqlite_source_id, METH_NOARGS, "sqlite3_sourceid() of the SQLite this module runs on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "nsysaudit's native CUDA API scan and integer reader (native/scan.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    fill_tables();
    if (PyType_Ready(&PlanType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    NativeError = PyErr_NewException("nsysaudit.read._native.Error", PyExc_RuntimeError, NULL);
    if (!NativeError || PyModule_AddObjectRef(m, "Error", NativeError) || PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) ||
        PyModule_AddIntConstant(m, "ABI", NSA_ABI) || PyModule_AddIntConstant(m, "CORR_GROUP", CORR_GROUP) ||
        PyModule_AddStringConstant(m, "SQLITE_HEADER_VERSION", SQLITE_VERSION)) {
        Py_XDECREF(NativeError);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
