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
    int64_t page_rows, handovers; /* rows reduced from the pages; 1 when SQLite read the range */
    span *spans; /* open addressing, span_cap slots; the NULL-gpid span is null_span */
    int64_t span_cap, span_n;
    span null_span;
    int64_t *key_rows, *key_first_name; /* per allocation key */
    uint8_t *key_first_null;
    char error[512];
    char handover[200]; /* why the page reader gave the range back to SQLite ("" when it did not) */
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

/* --- the table's own pages, read without the VDBE ---------------------------------------------
 * SQLite's VDBE spends about 1,100 instructions a row to hand the six integers to nsa_reduce (the
 * cursor, OP_Column six times, the aggregate's call); the reduction itself about 345. So where the
 * table is an ordinary rowid b-tree of a rollback-mode file, its pages are read through the
 * connection's own file handle (the VFS's xRead: no second descriptor, no mmap, so a file truncated
 * under us is a read error, not SIGBUS) and its records decoded here. What this reader leaves to
 * SQLite (an overflow page, a record shorter than the column it needs, a read error) gives the
 * whole range back: what was reduced is reset and SQLite reads the range from its first rowid, as
 * it always did. (Going on from the last rowid read would not do: a damaged page can hold a cell
 * whose rowid SQLite's seek skips but its scan from the start reads.) A b-tree breaking a rule every
 * SQLite file keeps (keys out of order, a cell outside its page, ...) is handed over the same way:
 * whether the table is damaged is not this reader's to say but SQLite's own PRAGMA quick_check's,
 * run beside the scan for every engine (nsysaudit/read/damage.py), so every engine gives one answer.
 * The reader only reads what it has checked, and gives SQLite's answer or hands the range over:
 * tests/test_reading_pages.py compares both on every fixture and on pages damaged at random.
 */
#define MAX_DEPTH 20 /* SQLite's own bound on a b-tree's depth (BTCURSOR_MAX_DEPTH) */
#define RUN_PAGES 64 /* consecutive child pages read in one call */
#define MAX_FIELDS 256

/* WALK_HANDOVER: SQLite reads the range (something this reader leaves to it, or a b-tree breaking a
 * rule every SQLite file keeps: pages->why says which); WALK_PAST: the range's last row was read */
enum { WALK_ON = 0, WALK_HANDOVER = 1, WALK_PAST = 2, WALK_FAILED = -1 };

typedef struct {
    sqlite3_file *fp;
    int64_t page_size, usable, n_pages, visited;
    uint8_t *run;            /* run_n pages from page run_first */
    int64_t run_first, run_n;
    int64_t *keys[MAX_DEPTH];     /* of each interior page on the path: its keys */
    int64_t *children[MAX_DEPTH]; /* and its child pages (one more than its keys: the right-most) */
    const int32_t *layout;   /* per column of the SELECT: its field in the record, or -1 (NULL) */
    int max_field;
    int64_t lo, hi;
    int64_t page;            /* the page being read */
    char why[160];
} pages;

/* Give the range back to SQLite, saying why (on the page being read); returns WALK_HANDOVER. */
static int handover(pages *p, const char *what) {
    snprintf(p->why, sizeof p->why, "page %lld: %s", (long long)p->page, what);
    return WALK_HANDOVER;
}

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

/* Page pgno; ``ahead``: how many pages from pgno on the caller will want (read in one call). */
static const uint8_t *page_at(pages *p, int64_t pgno, int64_t ahead) {
    if (pgno >= p->run_first && pgno < p->run_first + p->run_n) return p->run + (pgno - p->run_first) * p->page_size;
    if (ahead > p->n_pages - pgno + 1) ahead = p->n_pages - pgno + 1; /* pgno <= n_pages: at least 1 */
    p->run_n = 0;
    if (p->fp->pMethods->xRead(p->fp, p->run, (int)(ahead * p->page_size), (pgno - 1) * p->page_size) != SQLITE_OK)
        return NULL;
    p->run_first = pgno;
    p->run_n = ahead;
    return p->run;
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

/* One record's six values, as reduce_step reads them: 0 when done, WALK_HANDOVER when its header and
 * its payload disagree or it lacks a field it needs (the column's DEFAULT). */
static int record(pages *p, const uint8_t *a, uint64_t n, int64_t *v, uint8_t *nulls, uint8_t *wrong) {
    uint64_t header, st, size;
    int k = varint(a, a + n, &header);
    if (!k || header < (uint64_t)k || header > n) return handover(p, "a record header larger than its record");
    uint64_t types[MAX_FIELDS], offsets[MAX_FIELDS];
    uint64_t off = header;
    int fields = 0;
    const uint8_t *h = a + k, *end = a + header;
    for (; fields <= p->max_field && h < end; fields++) { /* the fields the columns need */
        if (!serial_type(&h, end, &st) || (size = serial_size(st)) > n - off)
            return handover(p, "a record's values do not fit in it");
        types[fields] = st;
        offsets[fields] = off;
        off += size;
    }
    while (h < end) { /* the others: only their sizes, which must add up to the payload */
        if (!serial_type(&h, end, &st) || (size = serial_size(st)) > n - off)
            return handover(p, "a record's values do not fit in it");
        off += size;
    }
    if (off != n) return handover(p, "a record's values do not fill it");
    *nulls = 0;
    *wrong = 0;
    for (int c = 0; c < NCOL; c++) {
        int f = p->layout[c];
        v[c] = 0;
        if (f < 0) {
            *nulls |= (uint8_t)(1 << c);
            continue;
        }
        if (f >= fields) return handover(p, "a record older than a column (its DEFAULT is SQLite's)");
        uint64_t t = types[f];
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
        } else { /* REAL, TEXT, BLOB: read as NULL and the row counted, as reduce_step does */
            *nulls |= (uint8_t)(1 << c);
            *wrong = 1;
        }
    }
    return 0;
}

/* Rowids of page pgno's subtree lie in (lower, upper] (has_lower, has_upper: bounded at all). */
static int walk(ctx *x, pages *p, int64_t pgno, int64_t ahead, int depth, int has_lower, int64_t lower,
                int has_upper, int64_t upper) {
    if (depth >= MAX_DEPTH) return handover(p, "a child page deeper than 20 levels");
    if (++p->visited > p->n_pages) return handover(p, "more pages in the table than in the file (a cycle)");
    if (pgno < 2 || pgno > p->n_pages) return handover(p, "a page number outside the file");
    p->page = pgno;
    const uint8_t *page = page_at(p, pgno, ahead);
    if (!page) return handover(p, "a read error (SQLite's to report)");
    const int64_t u = p->usable;
    uint32_t n = be16(page + 3);
    /* SQLite's own checks: at most (page size - 8) / 6 cells (so the cell pointers, 2 bytes each
     * after a header of 8 or 12, lie inside the usable size, at least 480); a child page, or an
     * interior root, without any cell is damaged */
    if (n > (uint32_t)((p->page_size - 8) / 6)) return handover(p, "more cells than a page holds");
    if (n == 0 && (depth > 0 || page[0] != 0x0D)) return handover(p, "a child or interior page without cells");
    if (page[0] == 0x05) { /* interior table page: n cells (child, key), then the right-most child */
        int64_t *keys = p->keys[depth], *children = p->children[depth];
        /* every cell first, its key in order and within the page's own bounds: SQLite's seek to lo
         * searches them all, so the child it lands in is this loop's only if they are */
        for (uint32_t i = 0; i < n; i++) {
            uint32_t pc = be16(page + 12 + 2 * i);
            uint64_t k;
            if (pc < 12 + 2 * n || pc + 4 >= u || !varint(page + pc + 4, page + u, &k))
                return handover(p, "a cell outside its page");
            children[i] = be32(page + pc);
            keys[i] = (int64_t)k;
            if ((i > 0 ? keys[i] <= keys[i - 1] : has_lower && keys[i] <= lower) || (has_upper && keys[i] > upper))
                return handover(p, "keys out of order");
        }
        children[n] = be32(page + 8);
        for (uint32_t i = 0; i <= n; i++) {
            int last_child = i == n;
            /* a child whose rowids all lie below lo is skipped; past hi, the rows say when to stop
             * (the first rowid over hi), as they do for SQLite */
            if (!last_child && keys[i] < p->lo) continue;
            int64_t child = children[i];
            /* how many of the next children are the pages after this one (read in one call) */
            int64_t run = 1;
            if (!(child >= p->run_first && child < p->run_first + p->run_n))
                while (i + run <= n && run < RUN_PAGES && children[i + run] == child + run) run++;
            int rc = walk(x, p, child, run, depth + 1, i > 0 || has_lower, i > 0 ? keys[i - 1] : lower,
                          last_child ? has_upper : 1, last_child ? upper : keys[i]);
            if (rc != WALK_ON) return rc;
            p->page = pgno;
        }
        return WALK_ON;
    }
    if (page[0] != 0x0D) return handover(p, "not a table b-tree page");
    int past = 0;
    for (uint32_t i = 0; i < n; i++) { /* leaf table page: n cells (payload size, rowid, payload) */
        uint32_t pc = be16(page + 8 + 2 * i);
        if (pc < 8 + 2 * n || pc >= u) return handover(p, "a cell outside its page");
        const uint8_t *c = page + pc, *end = page + u;
        uint64_t size, rowid_u;
        int a = varint(c, end, &size);
        int b = a ? varint(c + a, end, &rowid_u) : 0;
        if (!b) return handover(p, "a cell outside its page");
        int64_t rowid = (int64_t)rowid_u;
        /* every cell's rowid in order, those past hi too: SQLite's seek searches them all */
        if ((has_lower && rowid <= lower) || (has_upper && rowid > upper)) return handover(p, "rowids out of order");
        has_lower = 1;
        lower = rowid;
        if (rowid > p->hi) past = 1;
        if (past || rowid < p->lo) continue;
        /* a payload over usable - 35 bytes spills to overflow pages: SQLite reads those */
        if (size > (uint64_t)(u - 35)) return handover(p, "a record on overflow pages");
        if ((uint64_t)(pc + a + b) + size > (uint64_t)u) return handover(p, "a cell runs past its page");
        int64_t v[NCOL];
        uint8_t nulls, wrong;
        int rc = record(p, c + a + b, size, v, &nulls, &wrong);
        if (rc != WALK_ON) return rc;
        if (reduce_row(x, v, nulls, wrong)) return WALK_FAILED;
        x->r->page_rows++;
    }
    return past ? WALK_PAST : WALK_ON;
}

/* Reduce rowids lo..hi of the table rooted at page ``root`` from its pages. Returns WALK_ON when
 * they are all reduced, WALK_HANDOVER when SQLite must read the range instead (the caller resets
 * what was reduced; the result's handover says why), WALK_FAILED when out of memory. Every
 * precondition the reader relies on is checked here first. */
static int precondition(ctx *x, const char *what) {
    snprintf(x->r->handover, sizeof x->r->handover, "%s", what);
    return WALK_HANDOVER;
}

static int reduce_pages(ctx *x, sqlite3 *db, int64_t root, const int32_t *layout, int64_t lo, int64_t hi) {
    pages p;
    memset(&p, 0, sizeof p);
    sqlite3_file *fp = NULL;
    uint8_t hdr[100];
    sqlite3_int64 file_size = 0;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &fp) != SQLITE_OK || !fp || !fp->pMethods ||
        fp->pMethods->xRead(fp, hdr, sizeof hdr, 0) != SQLITE_OK || fp->pMethods->xFileSize(fp, &file_size) != SQLITE_OK)
        return precondition(x, "the file cannot be read through its handle");
    p.page_size = be16(hdr + 16) == 1 ? 65536 : be16(hdr + 16);
    /* SQLite 3, rollback journal (WAL would put pages elsewhere), a power-of-two page size, the
     * header's page count (when valid) that of the file */
    if (memcmp(hdr, "SQLite format 3", 16) != 0 || hdr[18] != 1 || hdr[19] != 1 || p.page_size < 512 ||
        (p.page_size & (p.page_size - 1)) || file_size % p.page_size)
        return precondition(x, "not a rollback-mode SQLite 3 file of whole pages");
    p.usable = p.page_size - hdr[20];
    p.n_pages = file_size / p.page_size;
    if (p.usable < 480 || (be32(hdr + 24) == be32(hdr + 92) && be32(hdr + 28) != 0 && be32(hdr + 28) != p.n_pages))
        return precondition(x, "a page's usable size or the header's page count is not the file's");
    p.fp = fp;
    p.layout = layout;
    p.max_field = -1;
    for (int c = 0; c < NCOL; c++) {
        if (layout[c] >= MAX_FIELDS) return precondition(x, "a column past the 256th");
        if (layout[c] > p.max_field) p.max_field = layout[c];
    }
    p.lo = lo;
    p.hi = hi;
    int rc = WALK_FAILED;
    p.run = malloc((size_t)(RUN_PAGES * p.page_size) + 8); /* + 8: record() reads 8 bytes at a time */
    if (!p.run) goto done;
    size_t cells = (size_t)((p.page_size - 8) / 6 + 1);
    for (int d = 0; d < MAX_DEPTH; d++)
        if (!(p.keys[d] = malloc(cells * sizeof(int64_t))) || !(p.children[d] = malloc(cells * sizeof(int64_t))))
            goto done;
    rc = walk(x, &p, root, 1, 0, 0, 0, 0, 0);
    if (rc == WALK_PAST) rc = WALK_ON;
    if (rc == WALK_HANDOVER) snprintf(x->r->handover, sizeof x->r->handover, "%s", p.why);
done:
    free(p.run);
    for (int d = 0; d < MAX_DEPTH; d++) {
        free(p.keys[d]);
        free(p.children[d]);
    }
    return rc;
}

/* Back to nothing reduced (the page reader gave the range back to SQLite). */
static void reset(nsa_result *r, int64_t n_keys) {
    size_t keys = (size_t)(n_keys ? n_keys : 1);
    r->selected.n = r->marked.n = 0;
    memset(r->problems, 0, sizeof r->problems);
    r->counted = r->mismatch_rows = r->rows = r->page_rows = 0;
    free(r->spans); /* as if new: the spans' order is their table's */
    r->spans = NULL;
    r->span_cap = r->span_n = 0;
    memset(&r->null_span, 0, sizeof r->null_span);
    memset(r->key_rows, 0, keys * sizeof(int64_t));
    memset(r->key_first_name, 0, keys * sizeof(int64_t));
    memset(r->key_first_null, 0, keys);
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

static nsa_result *nsa_scan(const char *uri, const char *sql, int64_t lo, int64_t hi, const int64_t *w_gtid,
                     const int64_t *w_start, const int64_t *w_end, int64_t n_win, const int64_t *strings,
                     int64_t n_strings, int check_strings, const int64_t *marked, int64_t n_marked,
                     const int64_t *counted, int64_t n_counted, const int64_t *key_gpid, const int64_t *key_corr,
                     int64_t n_keys, const char *table, const int32_t *layout) {
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
    /* ``layout`` (where each column of the SELECT lies in the table's records) says the table is
     * one the page reader may read; it reads the whole range, or gives it all back to SQLite. */
    int64_t root = layout && table ? root_page(db, table) : 0;
    if (layout && table && root <= 1) snprintf(r->handover, sizeof r->handover, "the table's root page not found");
    if (root > 1) {
        int rc = reduce_pages(&x, db, root, layout, lo, hi);
        if (rc == WALK_FAILED || x.failed) {
            snprintf(r->error, sizeof r->error, "out of memory");
            goto done;
        }
        if (rc == WALK_ON) goto done;
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
    return r;
}

static void nsa_free(nsa_result *r) {
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

/* --- the Python module: nsysaudit.read._native (types in nsysaudit/read/_native.pyi) --------- */

/* The module's interface version: nsysaudit/read/native.py uses a build only of its own version
 * (a stale build from another scan.c is not called). */
#define NSA_ABI 2

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

static PyObject *py_scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"uri", "sql", "lo", "hi", "w_gtid", "w_start", "w_end", "strings", "check_strings",
                               "marked", "counted", "key_gpid", "key_corr", "table", "layout", NULL};
    const char *uri, *sql, *table = NULL;
    long long lo, hi;
    int check_strings;
    PyObject *objects[N_BUFFERS], *layout_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ssLLOOOOpOOOO|zO:scan", keywords, &uri, &sql, &lo, &hi,
                                     &objects[0], &objects[1], &objects[2], &objects[3], &check_strings,
                                     &objects[4], &objects[5], &objects[6], &objects[7], &table, &layout_obj))
        return NULL;
    int32_t layout[NCOL];
    int has_layout = layout_obj != Py_None;
    if (has_layout) {
        PyObject *seq = PySequence_Fast(layout_obj, "layout: expected a sequence of 6 ints");
        if (!seq) return NULL;
        int bad = PySequence_Fast_GET_SIZE(seq) != NCOL;
        for (int c = 0; c < NCOL && !bad; c++) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, c));
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return NULL;
            }
            bad = v < -1 || v > INT32_MAX;
            layout[c] = (int32_t)v;
        }
        Py_DECREF(seq);
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "layout: expected 6 field numbers (-1: a column the table lacks)");
            return NULL;
        }
    }
    Py_buffer views[N_BUFFERS];
    int held = 0;
    PyObject *out = NULL;
    for (; held < N_BUFFERS; held++)
        if (int64_buffer(objects[held], &views[held], BUFFER_NAMES[held])) goto release;
    int64_t n_win = views[0].len / 8, n_keys = views[6].len / 8;
    if (views[1].len / 8 != n_win || views[2].len / 8 != n_win || views[7].len / 8 != n_keys) {
        PyErr_SetString(PyExc_ValueError, "the windows' (or the keys') arrays differ in length");
        goto release;
    }
    nsa_result *r;
    Py_BEGIN_ALLOW_THREADS
    r = nsa_scan(uri, sql, lo, hi, views[0].buf, views[1].buf, views[2].buf, n_win, views[3].buf, views[3].len / 8,
                 check_strings, views[4].buf, views[4].len / 8, views[5].buf, views[5].len / 8, views[6].buf,
                 views[7].buf, n_keys, has_layout ? table : NULL, has_layout ? layout : NULL);
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
            "{sLsLsLsLsLsssNsNsNsy#sy#sy#s(LLLLLLL)}", "rows", (long long)r->rows, "mismatch_rows",
            (long long)r->mismatch_rows, "counted", (long long)r->counted, "page_rows", (long long)r->page_rows,
            "handovers", (long long)r->handovers, "handover", r->handover, "selected", rows_tuple(&r->selected),
            "marked", rows_tuple(&r->marked), "spans", spans_list(r),
            "key_rows", (const char *)r->key_rows, (Py_ssize_t)keys, "key_first_name",
            (const char *)r->key_first_name, (Py_ssize_t)keys, "key_first_null", (const char *)r->key_first_null,
            (Py_ssize_t)n_keys, "problems", (long long)r->problems[0], (long long)r->problems[1],
            (long long)r->problems[2], (long long)r->problems[3], (long long)r->problems[4],
            (long long)r->problems[5], (long long)r->problems[6]);
    }
    nsa_free(r);
release:
    while (held > 0) PyBuffer_Release(&views[--held]);
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
    {"read", (PyCFunction)(void (*)(void))py_read, METH_VARARGS | METH_KEYWORDS,
     "The rows of a query of integer columns: (values, nulls, rows, values of another type)."},
    {"sqlite_version", py_sqlite_version, METH_NOARGS, "sqlite3_libversion() of the SQLite this module runs on."},
    {"sqlite_source_id", py_sqlite_source_id, METH_NOARGS, "sqlite3_sourceid() of the SQLite this module runs on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "nsysaudit's native CUDA API scan and integer reader (native/scan.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    NativeError = PyErr_NewException("nsysaudit.read._native.Error", PyExc_RuntimeError, NULL);
    if (!NativeError || PyModule_AddObjectRef(m, "Error", NativeError) || PyModule_AddIntConstant(m, "ABI", NSA_ABI) ||
        PyModule_AddStringConstant(m, "SQLITE_HEADER_VERSION", SQLITE_VERSION)) {
        Py_XDECREF(NativeError);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
