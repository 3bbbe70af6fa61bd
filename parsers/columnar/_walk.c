/* The per-record loops of reading a capture that numpy cannot vectorize (or only slowly), in C.
 *
 * Walking record headers is a chain (each record's length says where the next one starts) and a
 * frame check sequence is one CRC-32 per frame: in Python both cost a few hundred ns per record and
 * hold the GIL. Here they cost a few ns per record, and the CRCs run with the GIL released, so that
 * another thread decodes meanwhile. Decryption's byte shuffling around the AES (counter blocks, the
 * XOR-and-scatter of key streams, headers, finding the bare 802.11 frames of a chunk) is here too:
 * numpy needed several gathers and scatters per frame's rows where one pass does. So are two decoding
 * loops: the first header bytes of every radiotap record and of the 802.11 frame behind it, copied in
 * one pass (numpy's two gathers each met the bytes cold), and the TCP option walk (a chain: each
 * option's length says where the next one starts; numpy stepped all rows one option at a time, with
 * fast paths for the usual layouts that cost ~0.1 s per million segments). Everything else stays
 * numpy. parsers/accel.py loads this module; without it the numpy code gives the same results
 * (tests compare them).
 *
 * Every read is bounds-checked against the buffer: the callers pass untrusted files.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifndef _WIN32
#include <sys/mman.h>
#include <unistd.h>
#endif

typedef uint32_t (*crc_fn)(uint32_t crc, const uint8_t *buf, uint32_t len);

static uint32_t crc_table[8][256];

static void build_crc_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

/* CRC-32 (IEEE 802.3, as zlib's crc32) eight bytes at a time: used when no faster one is given. */
static uint32_t crc32_sliced(uint32_t crc, const uint8_t *p, uint32_t len)
{
    uint32_t c = ~crc;
    while (len && ((uintptr_t)p & 7)) {
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

/* How far ahead of a record walk memory is asked for (pcap_walk). */
#define PREFETCH_BYTES 4096

static inline void prefetch(const uint8_t *p)
{
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 0, 0);
#else
    (void)p;
#endif
}

#if defined(__linux__) && !defined(MADV_POPULATE_READ)
#define MADV_POPULATE_READ 22
#endif

/* Map the pages of buf[start:stop] (clipped to size) in one call where the kernel can (Linux >= 5.14):
   far cheaper than a page fault per 64 kB as a walk meets them. Failure changes nothing: the walk
   faults the pages in as before. */
static void populate(const void *buf, long long start, long long stop, long long size)
{
#if defined(__linux__) && defined(MADV_POPULATE_READ)
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        return;
    if (stop > size)
        stop = size;
    long long first = start / page * page;
    if (stop > first)
        (void)madvise((char *)buf + first, (size_t)(stop - first), MADV_POPULATE_READ);
#else
    (void)buf; (void)start; (void)stop; (void)size;
#endif
}

static inline uint32_t rd32(const uint8_t *p, int swap)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return swap ? __builtin_bswap32(v) : v;
}

/* Growing arrays of record offsets and (for pcap) copies of their 16-byte headers. */
typedef struct {
    int64_t *data;
    uint8_t *heads;     /* NULL: offsets only */
    Py_ssize_t n, cap;
    int with_heads;
    int failed;         /* an allocation failed: the walk stopped there */
} Offsets;

static int offsets_push(Offsets *o, int64_t v, const uint8_t *head)
{
    if (o->n == o->cap) {
        Py_ssize_t cap = o->cap ? o->cap * 2 : 4096;
        int64_t *d = PyMem_RawRealloc(o->data, (size_t)cap * sizeof(int64_t));
        if (d == NULL)
            return o->failed = -1;
        o->data = d;
        if (o->with_heads) {
            uint8_t *h = PyMem_RawRealloc(o->heads, (size_t)cap * 16);
            if (h == NULL)
                return o->failed = -1;
            o->heads = h;
        }
        o->cap = cap;
    }
    if (o->with_heads)
        memcpy(o->heads + o->n * 16, head, 16);
    o->data[o->n++] = v;
    return 0;
}

/* Check a walk's arguments: pos >= 0, lim <= len(buf) - reach (so that every header read at a position
   before lim lies inside buf) and its mode. Else release the buffer, set ValueError and return 0. */
static int walk_args_ok(Py_buffer *view, long long pos, long long lim, long long reach, int mode_ok,
                        const char *err)
{
    if (pos >= 0 && lim <= (long long)view->len - reach && mode_ok)
        return 1;
    PyBuffer_Release(view);
    PyErr_SetString(PyExc_ValueError, err);
    return 0;
}

/* Release the walk's buffer and return its result (or NULL with MemoryError if the walk failed). */
static PyObject *offsets_result(Py_buffer *view, Offsets *o, int64_t next)
{
    PyObject *res = NULL;
    PyBuffer_Release(view);
    if (o->failed) {
        PyErr_NoMemory();
    } else {
        PyObject *b = PyBytes_FromStringAndSize((const char *)o->data, o->n * (Py_ssize_t)sizeof(int64_t));
        if (b != NULL && o->with_heads) {
            PyObject *h = PyBytes_FromStringAndSize((const char *)o->heads, o->n * 16);
            res = h == NULL ? NULL : Py_BuildValue("(NNL)", b, h, (long long)next);
            if (h == NULL)
                Py_DECREF(b);
        } else if (b != NULL) {
            res = Py_BuildValue("(NL)", b, (long long)next);
        }
    }
    PyMem_RawFree(o->data);
    PyMem_RawFree(o->heads);
    return res;
}

PyDoc_STRVAR(pcap_walk_doc,
"pcap_walk(buf, pos, lim, swap, lengths) -> (offsets as int64 bytes, headers, next position)\n\n"
"Offsets of the pcap record headers starting at pos, one after another, while they start before lim\n"
"(lim <= len(buf) - 15, so that every header read lies inside buf). swap: the file's byte order is\n"
"not the machine's. lengths: 0 caplen is the first length field, 1 the second, 2 the smaller.\n"
"headers: the 16 bytes of each record header, as in the file.");

static PyObject *pcap_walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long pos, lim;
    int swap, lengths;
    if (!PyArg_ParseTuple(args, "y*LLpi", &view, &pos, &lim, &swap, &lengths))
        return NULL;
    if (!walk_args_ok(&view, pos, lim, 15, lengths >= 0 && lengths <= 2,
                      "pcap_walk: position, limit or mode out of range"))
        return NULL;
    const uint8_t *buf = view.buf;
    Offsets o = {NULL, NULL, 0, 0, 1, 0};
    long long ahead = pos, end = (long long)view.len;
    Py_BEGIN_ALLOW_THREADS
    populate(view.buf, pos, lim + 16, end);
    while (pos < lim) {
        /* Each header's address comes from the one before: alone, every record is a cache miss
           waited for in turn. Records lie end to end, so the lines PREFETCH_BYTES ahead are asked
           for meanwhile (a hint: no fault, no effect on the result). */
        long long stop = pos + PREFETCH_BYTES < end ? pos + PREFETCH_BYTES : end;
        for (; ahead < stop; ahead += 64)
            prefetch(buf + ahead);
        if (offsets_push(&o, pos, buf + pos))
            break;
        uint32_t a = rd32(buf + pos + 8, swap), b = rd32(buf + pos + 12, swap);
        uint32_t len = lengths == 0 ? a : lengths == 1 ? b : (a < b ? a : b);
        pos += 16 + (long long)len;
    }
    Py_END_ALLOW_THREADS
    return offsets_result(&view, &o, pos);
}

PyDoc_STRVAR(pcapng_walk_doc,
"pcapng_walk(buf, pos, lim, swap) -> (offsets as int64 bytes, next position)\n\n"
"Offsets of the packet blocks (EPB, SPB, OPB) starting at pos, one after another, while they start\n"
"before lim (lim <= len(buf) - 7); stops at any other block type or a total length that is under 12\n"
"or not a multiple of 4, returning that block's position as the next one.");

static PyObject *pcapng_walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long pos, lim;
    int swap;
    if (!PyArg_ParseTuple(args, "y*LLp", &view, &pos, &lim, &swap))
        return NULL;
    if (!walk_args_ok(&view, pos, lim, 7, 1, "pcapng_walk: position or limit out of range"))
        return NULL;
    const uint8_t *buf = view.buf;
    Offsets o = {NULL, NULL, 0, 0, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    while (pos < lim) {
        uint32_t t = rd32(buf + pos, swap), n = rd32(buf + pos + 4, swap);
        if ((t != 6 && t != 3 && t != 2) || n < 12 || (n & 3))
            break;
        if (offsets_push(&o, pos, NULL))
            break;
        pos += n;
    }
    Py_END_ALLOW_THREADS
    return offsets_result(&view, &o, pos);
}

PyDoc_STRVAR(crc32_many_doc,
"crc32_many(buf, starts, ends, fn) -> uint32 bytes\n\n"
"The CRC-32 (zlib's) of buf[starts[i]:ends[i]] for each i; starts and ends are int64 buffers of one\n"
"length, each span inside buf. fn: the address of a function with zlib-ng's zng_crc32 signature to\n"
"use, or 0 for the built-in one. The GIL is released while the CRCs are computed.");

static PyObject *crc32_many(PyObject *self, PyObject *args)
{
    Py_buffer view, sv, ev;
    unsigned long long fnaddr;
    if (!PyArg_ParseTuple(args, "y*y*y*K", &view, &sv, &ev, &fnaddr))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = sv.len / (Py_ssize_t)sizeof(int64_t);
    if (sv.len != ev.len || sv.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "crc32_many: starts and ends must be int64 buffers of one length");
        goto done;
    }
    const int64_t *s = sv.buf, *e = ev.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || e[i] < s[i] || e[i] > (int64_t)view.len) {
            PyErr_Format(PyExc_ValueError, "crc32_many: span %zd [%lld, %lld) is not inside the buffer",
                         i, (long long)s[i], (long long)e[i]);
            goto done;
        }
    }
    out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out == NULL)
        goto done;
    uint32_t *crcs = (uint32_t *)PyBytes_AS_STRING(out);
    crc_fn fn = fnaddr ? (crc_fn)(uintptr_t)fnaddr : crc32_sliced;
    const uint8_t *buf = view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = buf + s[i];
        int64_t left = e[i] - s[i];
        uint32_t c = 0;
        while (left > 0) {          /* the function takes 32-bit lengths */
            uint32_t step = left > 0x40000000 ? 0x40000000u : (uint32_t)left;
            c = fn(c, p, step);
            p += step;
            left -= step;
        }
        crcs[i] = c;
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    return out;
}

PyDoc_STRVAR(radiotap_fcs_doc,
"radiotap_fcs(buf, offset, caplen, wirelen, linktype, fn) -> (first as int64 bytes, ok as bool bytes)\n\n"
"parsers.layers.fcs.radiotap_fcs in one pass with the GIL released: for each record (int64 buffers of one\n"
"length) of link type 127, whole (caplen >= wirelen >= 0, caplen >= 16), whose radiotap Flags field\n"
"-- found the simple way: first presence word, at most 8 words, TSFT then Flags -- says an FCS ends\n"
"the frame, where the 802.11 frame starts and whether the CRC-32 of frame and FCS is right; -1 and\n"
"false elsewhere. fn as for crc32_many.");

static PyObject *radiotap_fcs(PyObject *self, PyObject *args)
{
    Py_buffer view, ov, cv, wv, lv;
    unsigned long long fnaddr;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*K", &view, &ov, &cv, &wv, &lv, &fnaddr))
        return NULL;
    PyObject *first_b = NULL, *ok_b = NULL, *res = NULL;
    Py_ssize_t n = ov.len / (Py_ssize_t)sizeof(int64_t);
    if (ov.len % (Py_ssize_t)sizeof(int64_t) || cv.len != ov.len || wv.len != ov.len || lv.len != ov.len) {
        PyErr_SetString(PyExc_ValueError, "radiotap_fcs: record arrays must be int64 buffers of one length");
        goto done;
    }
    first_b = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    ok_b = PyBytes_FromStringAndSize(NULL, n);
    if (first_b == NULL || ok_b == NULL)
        goto done;
    const int64_t *off = ov.buf, *cl = cv.buf, *wl = wv.buf, *lt = lv.buf;
    int64_t *first = (int64_t *)PyBytes_AS_STRING(first_b);
    uint8_t *ok = (uint8_t *)PyBytes_AS_STRING(ok_b);
    const uint8_t *b = view.buf;
    const int64_t size = view.len;
    crc_fn fn = fnaddr ? (crc_fn)(uintptr_t)fnaddr : crc32_sliced;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        first[i] = -1;
        ok[i] = 0;
        int64_t at = off[i], caplen = cl[i];
        if (lt[i] != 127 || caplen < wl[i] || caplen < 16 || at < 0 || at > size - caplen)
            continue;
        int64_t it_len = (int64_t)b[at + 2] | (int64_t)b[at + 3] << 8;
        if (it_len < 8 || it_len + 4 > caplen)
            continue;
        uint32_t w0 = rd32(b + at + 4, 0);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w0 = __builtin_bswap32(w0);
#endif
        int64_t words = 1;
        uint32_t ext = w0 >> 31;
        for (int k = 1; k < 8 && ext; k++) {
            if (8 + 4 * k > it_len) {      /* the next word would pass the header: stop counting */
                ext = 0;
                break;
            }
            uint32_t wk = rd32(b + at + 4 + 4 * k, 0);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            wk = __builtin_bswap32(wk);
#endif
            words++;
            ext = wk >> 31;
        }
        if (ext || !(w0 & 2))              /* more than 8 words, or no Flags field */
            continue;
        int64_t flags_at = 4 + 4 * words;
        if (w0 & 1)                        /* TSFT (8 bytes, 8-aligned) comes first */
            flags_at = (flags_at + 7) / 8 * 8 + 8;
        if (flags_at >= it_len || !(b[at + flags_at] & 0x10))
            continue;
        const uint8_t *p = b + at + it_len;
        int64_t left = caplen - it_len;
        uint32_t c = 0;
        while (left > 0) {
            uint32_t step = left > 0x40000000 ? 0x40000000u : (uint32_t)left;
            c = fn(c, p, step);
            p += step;
            left -= step;
        }
        first[i] = at + it_len;
        ok[i] = c == 0x2144DF1Cu;
    }
    Py_END_ALLOW_THREADS
    res = Py_BuildValue("(OO)", first_b, ok_b);
done:
    Py_XDECREF(first_b);
    Py_XDECREF(ok_b);
    PyBuffer_Release(&view);
    PyBuffer_Release(&ov);
    PyBuffer_Release(&cv);
    PyBuffer_Release(&wv);
    PyBuffer_Release(&lv);
    return res;
}

PyDoc_STRVAR(dontneed_doc,
"dontneed(buf, start, length) -> None\n\n"
"madvise(MADV_DONTNEED) on buf[start:start + length] (page-aligned, inside buf; buf a memory map)\n"
"with the GIL released; does nothing where MADV_DONTNEED is not defined.");

static PyObject *dontneed(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long start, length;
    if (!PyArg_ParseTuple(args, "y*LL", &view, &start, &length))
        return NULL;
    if (start < 0 || length < 0 || start > (long long)view.len - length) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "dontneed: range outside the buffer");
        return NULL;
    }
    int rc = 0;
#ifdef MADV_DONTNEED
    if (length > 0) {
        char *p = (char *)view.buf + start;
        Py_BEGIN_ALLOW_THREADS
        rc = madvise(p, (size_t)length, MADV_DONTNEED);
        Py_END_ALLOW_THREADS
    }
#endif
    PyBuffer_Release(&view);
    if (rc != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* --- CCMP/GCMP helpers: the byte shuffling around the AES of parsers/crypto/ccmp.py ---------------
 * The AES itself stays with the `cryptography` package (one ECB call over many blocks); these build
 * its input (counter blocks) and apply its output (XOR into the captured bytes, scattered into the
 * plaintext buffer) in one pass each, where numpy needed a gather, a repeat and a scatter. */

static int int64_args(const char *fn, Py_ssize_t n, Py_buffer **bufs, int count)
{
    for (int k = 0; k < count; k++) {
        if (bufs[k]->len != n * (Py_ssize_t)sizeof(int64_t)) {
            PyErr_Format(PyExc_ValueError, "%s: per-frame arrays must be int64 buffers of one length", fn);
            return 0;
        }
    }
    return 1;
}

PyDoc_STRVAR(tcp_options_doc,
"tcp_options(buf, pos, hend, end) -> (tsval, tsecr, mss, wscale, sack_perm, sack_pos, sack_cnt, reason)\n\n"
"The TCP option walk of parsers.layers.transport for each row (int64 buffers of one length): the options\n"
"from pos[i] to the header's end hend[i], of which the bytes before end[i] were captured; None if a\n"
"position lies outside buf (the caller's numpy walk then decides). EOL stops; NOP is one byte; a length\n"
"byte past the header (reason 1), a length < 2 (2) or an option past the header (3) stop the walk; an\n"
"option cut by end stops it; an MPTCP option shorter than 4 (4) stops it; a SACK length other than\n"
"2 + 8n is reason 5 and stops the walk if the first SACK option has no whole block. The first MSS\n"
"(length 4), window scale (3), timestamps (10; tsval shown when 6 bytes are captured) and SACK\n"
"(where its blocks start, how many whole ones are captured) count; SACK-permitted counts with any\n"
"length. int64 results, -1 where absent (sack_perm bool, reason int8: the first met, 0 none).");

static inline int64_t be32_at(const uint8_t *p)
{
    return (int64_t)p[0] << 24 | (int64_t)p[1] << 16 | (int64_t)p[2] << 8 | (int64_t)p[3];
}

static PyObject *tcp_options(PyObject *self, PyObject *args)
{
    Py_buffer bv, pv, hv, ev;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &bv, &pv, &hv, &ev))
        return NULL;
    PyObject *out[8] = {NULL}, *res = NULL;
    Py_ssize_t n = pv.len / (Py_ssize_t)sizeof(int64_t);
    Py_buffer *arrays[] = {&pv, &hv, &ev};
    if (!int64_args("tcp_options", n, arrays, 3))
        goto done;
    const uint8_t *b = bv.buf;
    const int64_t size = bv.len, *pos = pv.buf, *hend = hv.buf, *end = ev.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (pos[i] < 0 || end[i] > size || hend[i] > ((int64_t)1 << 60)) {
            Py_INCREF(Py_None);
            res = Py_None;
            goto done;
        }
    }
    for (int k = 0; k < 8; k++) {
        Py_ssize_t w = k == 4 || k == 7 ? 1 : (Py_ssize_t)sizeof(int64_t);
        out[k] = PyBytes_FromStringAndSize(NULL, n * w);
        if (out[k] == NULL)
            goto done;
    }
    int64_t *tsval = (int64_t *)PyBytes_AS_STRING(out[0]), *tsecr = (int64_t *)PyBytes_AS_STRING(out[1]);
    int64_t *mss = (int64_t *)PyBytes_AS_STRING(out[2]), *wscale = (int64_t *)PyBytes_AS_STRING(out[3]);
    uint8_t *perm = (uint8_t *)PyBytes_AS_STRING(out[4]);
    int64_t *sack_pos = (int64_t *)PyBytes_AS_STRING(out[5]), *sack_cnt = (int64_t *)PyBytes_AS_STRING(out[6]);
    int8_t *reason = (int8_t *)PyBytes_AS_STRING(out[7]);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = pos[i], he = hend[i], en = end[i];
        int64_t tv = -1, te = -1, ms = -1, ws = -1, sp = -1, sc = 0;
        int seen = 0, pm = 0, why = 0;
        /* the option bytes are at most 40, and every step moves on by one byte at least */
        for (int step = 0; step < 64 && p < he && p < en; step++) {
            int64_t kind = b[p];
            if (kind == 1) {
                p++;
                continue;
            }
            if (kind == 0)
                break;
            if (p + 1 >= he) {
                why = why ? why : 1;
                break;
            }
            if (p + 1 >= en)
                break;
            int64_t len = b[p + 1];
            if (len < 2) {
                why = why ? why : 2;
                break;
            }
            if (p + len > he) {
                why = why ? why : 3;
                break;
            }
            int mptcp = kind == 30 && len < 4;
            if (mptcp)
                why = why ? why : 4;
            int whole = p + len <= en && !mptcp;
            if (kind == 2 && len == 4 && whole && ms < 0)
                ms = (int64_t)b[p + 2] << 8 | b[p + 3];
            if (kind == 3 && len == 3 && whole && ws < 0)
                ws = b[p + 2];
            if (kind == 4)
                pm = 1;
            int ts = kind == 8 && len == 10 && tv < 0;
            if (ts && p + 6 <= en)
                tv = be32_at(b + p + 2);
            if (ts && whole)
                te = be32_at(b + p + 6);
            int throws = 0;
            if (kind == 5) {
                int bad = (len - 2) % 8 != 0 || len == 2;
                if (bad)
                    why = why ? why : 5;
                throws = bad && len < 10 && !seen;
                seen = 1;
                int64_t blocks = (len - 2) / 8, room = (en - p - 2) / 8;
                if (room < blocks)
                    blocks = room;
                if (blocks > 0 && sp < 0) {
                    sp = p + 2;
                    sc = blocks;
                }
            }
            p += len;
            if (!whole || throws)
                break;
        }
        tsval[i] = tv;
        tsecr[i] = te;
        mss[i] = ms;
        wscale[i] = ws;
        perm[i] = (uint8_t)pm;
        sack_pos[i] = sp;
        sack_cnt[i] = sc;
        reason[i] = (int8_t)why;
    }
    Py_END_ALLOW_THREADS
    res = Py_BuildValue("(OOOOOOOO)", out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]);
done:
    for (int k = 0; k < 8; k++)
        Py_XDECREF(out[k]);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&pv);
    PyBuffer_Release(&hv);
    PyBuffer_Release(&ev);
    return res;
}

PyDoc_STRVAR(gather_ahead_doc,
"gather_ahead(buf, offset, head_width, next_width) -> (head, after, next)\n\n"
"For each record at offset[i] (an int64 buffer): head, the head_width bytes there; after, offset[i]\n"
"plus the little-endian u16 at head bytes 2-3 (radiotap's it_len; int64 bytes); next, the next_width\n"
"bytes at after. Bytes at or past buf's end read as 0 and bytes before its start as buf[0], as\n"
"parsers.columnar.gather.rows_bytes reads them. One pass with the GIL released: the second gather\n"
"finds its bytes in cache, where two numpy gathers each met them cold.");

/* rows_bytes' value of byte at position p (numpy's clip-then-mask of window()) */
static inline uint8_t byte_window(const uint8_t *b, int64_t size, int64_t p)
{
    if (size <= 0 || p >= size)
        return 0;
    return b[p < 0 ? 0 : p];
}

static inline void copy_row(uint8_t *dst, const uint8_t *b, int64_t size, int64_t p, int64_t w)
{
    if (p >= 0 && p <= size - w) {
        memcpy(dst, b + p, (size_t)w);
        return;
    }
    for (int64_t j = 0; j < w; j++)
        dst[j] = byte_window(b, size, p + j);
}

static PyObject *gather_ahead(PyObject *self, PyObject *args)
{
    Py_buffer bv, ov;
    int hw, nw;
    if (!PyArg_ParseTuple(args, "y*y*ii", &bv, &ov, &hw, &nw))
        return NULL;
    PyObject *head_b = NULL, *after_b = NULL, *next_b = NULL, *res = NULL;
    Py_ssize_t n = ov.len / (Py_ssize_t)sizeof(int64_t);
    Py_buffer *arrays[] = {&ov};
    if (!int64_args("gather_ahead", n, arrays, 1))
        goto done;
    if (hw < 4 || hw > 4096 || nw < 1 || nw > 4096) {
        PyErr_SetString(PyExc_ValueError, "gather_ahead: widths must be 4..4096 and 1..4096");
        goto done;
    }
    head_b = PyBytes_FromStringAndSize(NULL, n * hw);
    after_b = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    next_b = PyBytes_FromStringAndSize(NULL, n * nw);
    if (!head_b || !after_b || !next_b)
        goto done;
    const uint8_t *b = bv.buf;
    const int64_t size = bv.len, *off = ov.buf;
    uint8_t *head = (uint8_t *)PyBytes_AS_STRING(head_b), *next = (uint8_t *)PyBytes_AS_STRING(next_b);
    int64_t *after = (int64_t *)PyBytes_AS_STRING(after_b);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + 8 < n && off[i + 8] >= 0 && off[i + 8] < size)   /* a hint: records lie far apart */
            prefetch(b + off[i + 8]);
        uint8_t *h = head + i * (Py_ssize_t)hw;
        copy_row(h, b, size, off[i], hw);
        int64_t a = off[i] + ((int64_t)h[2] | (int64_t)h[3] << 8);
        after[i] = a;
        copy_row(next + i * (Py_ssize_t)nw, b, size, a, nw);
    }
    Py_END_ALLOW_THREADS
    res = Py_BuildValue("(OOO)", head_b, after_b, next_b);
done:
    Py_XDECREF(head_b);
    Py_XDECREF(after_b);
    Py_XDECREF(next_b);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&ov);
    return res;
}


PyDoc_STRVAR(ctr_blocks_doc,
"ctr_blocks(prefix, width, first, nb) -> bytes\n\n"
"Counter blocks of n frames one after another: nb[i] blocks for frame i, each its 16 - width prefix\n"
"bytes (prefix holds n of them back to back) and then first[i] + j (j = 0..nb[i]-1) big-endian in\n"
"width bytes (2 or 4). first and nb: int64 buffers of n items, nb >= 0.");

static PyObject *ctr_blocks(PyObject *self, PyObject *args)
{
    Py_buffer pv, fv, nv;
    int width;
    if (!PyArg_ParseTuple(args, "y*iy*y*", &pv, &width, &fv, &nv))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = nv.len / (Py_ssize_t)sizeof(int64_t);
    Py_buffer *arrays[] = {&fv, &nv};
    if (width != 2 && width != 4) {
        PyErr_SetString(PyExc_ValueError, "ctr_blocks: width must be 2 or 4");
        goto done;
    }
    const int pw = 16 - width;
    if (!int64_args("ctr_blocks", n, arrays, 2))
        goto done;
    if (pv.len != n * pw) {
        PyErr_SetString(PyExc_ValueError, "ctr_blocks: prefix must hold 16 - width bytes per frame");
        goto done;
    }
    const int64_t *first = fv.buf, *nb = nv.buf;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (nb[i] < 0 || nb[i] > ((int64_t)1 << 40)) {
            PyErr_SetString(PyExc_ValueError, "ctr_blocks: block counts must be >= 0");
            goto done;
        }
        total += nb[i];
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(total * 16));
    if (out == NULL)
        goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    const uint8_t *pre = pv.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = pre + i * pw;
        uint64_t c = (uint64_t)first[i];
        for (int64_t j = 0; j < nb[i]; j++, c++, o += 16) {
            if (width == 2)
                memcpy(o, p, 14);
            else
                memcpy(o, p, 12);
            if (width == 2) {
                o[14] = (uint8_t)(c >> 8);
                o[15] = (uint8_t)c;
            } else {
                o[12] = (uint8_t)(c >> 24);
                o[13] = (uint8_t)(c >> 16);
                o[14] = (uint8_t)(c >> 8);
                o[15] = (uint8_t)c;
            }
        }
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&pv);
    PyBuffer_Release(&fv);
    PyBuffer_Release(&nv);
    return out;
}

PyDoc_STRVAR(ctr_xor_doc,
"ctr_xor(buf, at, plen, stream, dest, dest_row) -> None\n\n"
"For each frame i (int64 buffers at, plen, dest_row of n items): the bytes buf[at[i]:at[i]+plen[i]]\n"
"(bytes past buf's end read as 0) XORed with the next ceil(plen[i]/16) 16-byte rows of stream, written\n"
"as whole rows to dest (a writable buffer of 16-byte rows) from row dest_row[i], the bytes past plen[i]\n"
"in the last row zero. stream must hold exactly the rows of all frames; every row written must lie in\n"
"dest (else ValueError, nothing written). The GIL is released meanwhile.");

static PyObject *ctr_xor(PyObject *self, PyObject *args)
{
    Py_buffer bv, av, lv, sv, dv, rv;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*y*", &bv, &av, &lv, &sv, &dv, &rv))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = av.len / (Py_ssize_t)sizeof(int64_t);
    Py_buffer *arrays[] = {&av, &lv, &rv};
    if (!int64_args("ctr_xor", n, arrays, 3))
        goto done;
    const int64_t *at = av.buf, *plen = lv.buf, *drow = rv.buf;
    const int64_t drows = dv.len / 16;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t nb = (plen[i] + 15) / 16;
        if (plen[i] < 0 || plen[i] > ((int64_t)1 << 40) || at[i] < 0 || at[i] > ((int64_t)1 << 60) || drow[i] < 0 || drow[i] > drows - nb) {
            PyErr_Format(PyExc_ValueError, "ctr_xor: frame %zd lies outside its buffers", i);
            goto done;
        }
        total += nb;
    }
    if (sv.len != total * 16) {
        PyErr_SetString(PyExc_ValueError, "ctr_xor: stream must hold the rows of every frame");
        goto done;
    }
    const uint8_t *b = bv.buf, *ks = sv.buf;
    uint8_t *d = dv.buf;
    const int64_t size = bv.len;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t *o = d + drow[i] * 16;
        int64_t a = at[i], left = plen[i];
        while (left > 0) {
            int64_t k = left < 16 ? left : 16;
            if (k == 16 && a + 16 <= size) {       /* a whole row: two 8-byte XORs */
                uint64_t x0, x1, k0, k1;
                memcpy(&x0, b + a, 8);
                memcpy(&x1, b + a + 8, 8);
                memcpy(&k0, ks, 8);
                memcpy(&k1, ks + 8, 8);
                x0 ^= k0;
                x1 ^= k1;
                memcpy(o, &x0, 8);
                memcpy(o + 8, &x1, 8);
            } else if (a + 16 <= size) {
                for (int64_t m = 0; m < k; m++)
                    o[m] = b[a + m] ^ ks[m];
            } else {
                for (int64_t m = 0; m < k; m++)
                    o[m] = (a + m < size ? b[a + m] : 0) ^ ks[m];
            }
            if (k < 16)
                memset(o + k, 0, (size_t)(16 - k));
            o += 16;
            ks += 16;
            a += 16;
            left -= k;
        }
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    res = Py_None;
done:
    PyBuffer_Release(&bv);
    PyBuffer_Release(&av);
    PyBuffer_Release(&lv);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&rv);
    return res;
}

PyDoc_STRVAR(put_headers_doc,
"put_headers(buf, s, hdr, dest, end) -> None\n\n"
"For each frame i (int64 buffers s, hdr, end of n items): copy the hdr[i] bytes buf[s[i]:] (bytes past\n"
"buf's end read as 0) to dest[end[i] - hdr[i]:end[i]] with the Protected bit (0x40 of byte 1)\n"
"cleared. Every span must lie in dest (else ValueError, nothing written).");

static PyObject *put_headers(PyObject *self, PyObject *args)
{
    Py_buffer bv, sv, hv, dv, ev;
    if (!PyArg_ParseTuple(args, "y*y*y*w*y*", &bv, &sv, &hv, &dv, &ev))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = sv.len / (Py_ssize_t)sizeof(int64_t);
    Py_buffer *arrays[] = {&sv, &hv, &ev};
    if (!int64_args("put_headers", n, arrays, 3))
        goto done;
    const int64_t *s = sv.buf, *hdr = hv.buf, *end = ev.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (hdr[i] < 2 || hdr[i] > 64 || s[i] < 0 || s[i] > ((int64_t)1 << 60) || end[i] > (int64_t)dv.len || end[i] - hdr[i] < 0) {
            PyErr_Format(PyExc_ValueError, "put_headers: frame %zd lies outside its buffers", i);
            goto done;
        }
    }
    const uint8_t *b = bv.buf;
    uint8_t *d = dv.buf;
    const int64_t size = bv.len;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t *o = d + end[i] - hdr[i];
        for (int64_t m = 0; m < hdr[i]; m++)
            o[m] = s[i] + m < size ? b[s[i] + m] : 0;
        o[1] &= 0xBF;
    }
    Py_INCREF(Py_None);
    res = Py_None;
done:
    PyBuffer_Release(&bv);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&hv);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&ev);
    return res;
}

PyDoc_STRVAR(dot11_locate_doc,
"dot11_locate(buf, offset, caplen, wirelen, linktype, others) -> (cand, start, end, wire, found)\n\n"
"parsers.decode.decrypt.candidates and locate over every record of a chunk in one pass (int64 buffers\n"
"of one length; others: int64 buffer of the 802.11 link types other than 105 and 127). cand (bool\n"
"bytes): the record may hold a protected data/management frame or an EAPOL frame; start, end, wire\n"
"(int64 bytes) and found (bool bytes): where its bare 802.11 frame lies and its length on the air, as\n"
"locate gives them. Bytes past buf's end read as 0 (as the numpy gathers read them).");

static inline uint8_t byte_at(const uint8_t *b, int64_t size, int64_t at)
{
    return at >= 0 && at < size ? b[at] : 0;
}

static inline uint8_t byte_clipped(const uint8_t *b, int64_t size, int64_t at)
{   /* numpy's data[np.minimum(at, top)] */
    return b[at < size - 1 ? (at < 0 ? 0 : at) : size - 1];
}

static const uint8_t LLC_EAPOL[8] = {0xAA, 0xAA, 0x03, 0x00, 0x00, 0x00, 0x88, 0x8E};

static int is_candidate(const uint8_t *b, int64_t size, int64_t off, int64_t cl, int64_t lt,
                        const int64_t *others, Py_ssize_t nothers)
{
    for (Py_ssize_t k = 0; k < nothers; k++)
        if (lt == others[k])
            return 1;
    int64_t start = -1, end = off + cl;
    if (lt == 105)
        start = off;
    else if (lt == 127 && cl >= 4)
        start = off + ((int64_t)byte_clipped(b, size, off + 2) | (int64_t)byte_clipped(b, size, off + 3) << 8);
    if (start < 0 || start + 24 > end)
        return 0;
    uint8_t fc0 = byte_clipped(b, size, start), fc1 = byte_clipped(b, size, start + 1);
    uint8_t ftype = fc0 & 0x0C;
    if (ftype == 0x04 || ftype == 0x0C)
        return 0;
    if (fc1 & 0x40)
        return 1;
    if (ftype != 0x08)
        return 0;
    for (int o = 0; o <= 16; o++) {     /* the EAPOL LLC/SNAP header within bytes 24..48 */
        int64_t at = start + 24 + o;
        if (at + 7 >= end)
            break;
        int m = 0;
        while (m < 8 && byte_clipped(b, size, at + m) == LLC_EAPOL[m])
            m++;
        if (m == 8)
            return 1;
    }
    return 0;
}

static PyObject *dot11_locate(PyObject *self, PyObject *args)
{
    Py_buffer bv, ov, cv, wv, lv, xv;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*", &bv, &ov, &cv, &wv, &lv, &xv))
        return NULL;
    PyObject *cand_b = NULL, *start_b = NULL, *end_b = NULL, *wire_b = NULL, *found_b = NULL, *res = NULL;
    Py_ssize_t n = ov.len / (Py_ssize_t)sizeof(int64_t);
    Py_buffer *arrays[] = {&ov, &cv, &wv, &lv};
    if (!int64_args("dot11_locate", n, arrays, 4))
        goto done;
    if (xv.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "dot11_locate: others must be an int64 buffer");
        goto done;
    }
    cand_b = PyBytes_FromStringAndSize(NULL, n);
    start_b = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    end_b = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    wire_b = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    found_b = PyBytes_FromStringAndSize(NULL, n);
    if (!cand_b || !start_b || !end_b || !wire_b || !found_b)
        goto done;
    const uint8_t *b = bv.buf;
    const int64_t size = bv.len;
    const int64_t *off = ov.buf, *cl = cv.buf, *wl = wv.buf, *lt = lv.buf, *others = xv.buf;
    const Py_ssize_t nothers = xv.len / (Py_ssize_t)sizeof(int64_t);
    uint8_t *cand = (uint8_t *)PyBytes_AS_STRING(cand_b), *found = (uint8_t *)PyBytes_AS_STRING(found_b);
    int64_t *st = (int64_t *)PyBytes_AS_STRING(start_b), *en = (int64_t *)PyBytes_AS_STRING(end_b);
    int64_t *wi = (int64_t *)PyBytes_AS_STRING(wire_b);
    if (size == 0 && n > 0) {
        PyErr_SetString(PyExc_ValueError, "dot11_locate: records in an empty buffer");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t o = off[i], c = cl[i], claimed = wl[i] > c ? wl[i] : c, t = lt[i] & 0xFFFF;
        cand[i] = (uint8_t)is_candidate(b, size, o, c, lt[i], others, nothers);
        st[i] = o;
        en[i] = o + c;
        wi[i] = claimed;
        found[i] = t == 105;
        if (t != 127 || c < 8)
            continue;
        /* locate's radiotap walk over the record's first 64 bytes */
        int64_t it_len = (int64_t)byte_at(b, size, o + 2) | (int64_t)byte_at(b, size, o + 3) << 8;
        uint32_t w0 = (uint32_t)byte_at(b, size, o + 4) | (uint32_t)byte_at(b, size, o + 5) << 8 |
                      (uint32_t)byte_at(b, size, o + 6) << 16 | (uint32_t)byte_at(b, size, o + 7) << 24;
        int good = byte_at(b, size, o) == 0;
        int64_t at = 4;
        int ext = (w0 >> 31) & 1;
        for (int k = 0; k < 12 && ext; k++) {
            at += 4;
            good = good && at + 4 <= c;
            uint8_t word = byte_at(b, size, o + (at + 3 < 63 ? at + 3 : 63));
            ext = good && ((word >> 7) & 1);
        }
        good = good && !ext && at + 4 <= 64;
        at += 4;
        good = good && it_len >= at && it_len <= c && !(w0 & (1u << 26));
        if (w0 & 1)
            at = (at + 7) / 8 * 8 + 8;
        int has_flags = (w0 & 2) && at < it_len;
        uint8_t flags = has_flags ? byte_at(b, size, o + (at < 63 ? at : 63)) : 0;
        good = good && !(has_flags && at > 63);
        int64_t e = c, cm = claimed;
        if (flags & 0x10) {             /* an FCS ends the frame */
            good = good && !(cm - it_len < 4 && !(c < wl[i]));
            e = e < cm - 4 ? e : cm - 4;
            cm -= 4;
        }
        good = good && e > it_len;
        st[i] = o + it_len;
        en[i] = o + e;
        wi[i] = cm - it_len;
        found[i] = (uint8_t)good;
    }
    Py_END_ALLOW_THREADS
    res = Py_BuildValue("(OOOOO)", cand_b, start_b, end_b, wire_b, found_b);
done:
    Py_XDECREF(cand_b);
    Py_XDECREF(start_b);
    Py_XDECREF(end_b);
    Py_XDECREF(wire_b);
    Py_XDECREF(found_b);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&ov);
    PyBuffer_Release(&cv);
    PyBuffer_Release(&wv);
    PyBuffer_Release(&lv);
    PyBuffer_Release(&xv);
    return res;
}

PyDoc_STRVAR(protected_fields_doc,
"protected_fields(buf, s, head_width) -> (head, fields, nonce)\n\n"
"The header fields parsers.crypto.batch.Protected reads from each protected frame starting at s[i]\n"
"(int64 buffer), in one pass: head (n * head_width bytes: the frame's first bytes, 0 past buf's end),\n"
"fields (8 * n int64, field by field: frame type, subtype, flags byte, header length, TID, key id, 0,\n"
"bit flags 1 four-address, 2 QoS, 4 ExtIV, 8 group addressed) and nonce (n * 13 bytes: the CCM nonce).");

static PyObject *protected_fields(PyObject *self, PyObject *args)
{
    Py_buffer bv, sv;
    int hw;
    if (!PyArg_ParseTuple(args, "y*y*i", &bv, &sv, &hw))
        return NULL;
    PyObject *head_b = NULL, *fields_b = NULL, *nonce_b = NULL, *res = NULL;
    Py_ssize_t n = sv.len / (Py_ssize_t)sizeof(int64_t);
    Py_buffer *arrays[] = {&sv};
    if (!int64_args("protected_fields", n, arrays, 1))
        goto done;
    if (hw < 32 || hw > 256) {
        PyErr_SetString(PyExc_ValueError, "protected_fields: head_width must be 32..256");
        goto done;
    }
    head_b = PyBytes_FromStringAndSize(NULL, n * hw);
    fields_b = PyBytes_FromStringAndSize(NULL, n * 8 * (Py_ssize_t)sizeof(int64_t));
    nonce_b = PyBytes_FromStringAndSize(NULL, n * 13);
    if (!head_b || !fields_b || !nonce_b)
        goto done;
    const uint8_t *b = bv.buf;
    const int64_t size = bv.len, *st = sv.buf;
    uint8_t *head = (uint8_t *)PyBytes_AS_STRING(head_b), *nonce = (uint8_t *)PyBytes_AS_STRING(nonce_b);
    int64_t *f = (int64_t *)PyBytes_AS_STRING(fields_b);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++, head += hw, nonce += 13) {
        int64_t a = st[i];
        if (a >= 0 && a <= size - hw)
            memcpy(head, b + a, (size_t)hw);
        else
            for (int k = 0; k < hw; k++)
                head[k] = byte_at(b, size, a + k);
        uint8_t fc0 = head[0], fc1 = head[1];
        int64_t ftype = (fc0 >> 2) & 3, sub = fc0 >> 4;
        int data = ftype == 2, four = data && (fc1 & 3) == 3, qos = data && (sub & 8);
        int order = (fc1 & 0x80) != 0;
        int64_t hdr = data ? 24 + 6 * four + 2 * qos + 4 * (qos && order) : 24 + 4 * order;
        int64_t qos_at = four ? 30 : 24;
        int64_t tid = qos ? head[qos_at < hw - 1 ? qos_at : hw - 1] & 0x0F : 0;
        uint8_t sec[8];
        for (int k = 0; k < 8; k++)
            sec[k] = byte_at(b, size, a + hdr + k);
        f[i] = ftype;                   /* field-major: each field's n values are contiguous */
        f[n + i] = sub;
        f[2 * n + i] = fc1;
        f[3 * n + i] = hdr;
        f[4 * n + i] = tid;
        f[5 * n + i] = sec[3] >> 6;
        f[6 * n + i] = 0;
        f[7 * n + i] = four | qos << 1 | ((sec[3] & 0x20) ? 4 : 0) | ((head[4] & 1) ? 8 : 0);
        nonce[0] = ftype == 0 ? 0x10 : (uint8_t)tid;
        memcpy(nonce + 1, head + 10, 6);
        nonce[7] = sec[7];
        nonce[8] = sec[6];
        nonce[9] = sec[5];
        nonce[10] = sec[4];
        nonce[11] = sec[1];
        nonce[12] = sec[0];
    }
    Py_END_ALLOW_THREADS
    res = Py_BuildValue("(OOO)", head_b, fields_b, nonce_b);
done:
    Py_XDECREF(head_b);
    Py_XDECREF(fields_b);
    Py_XDECREF(nonce_b);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&sv);
    return res;
}

static PyMethodDef methods[] = {
    {"protected_fields", protected_fields, METH_VARARGS, protected_fields_doc},
    {"dot11_locate", dot11_locate, METH_VARARGS, dot11_locate_doc},
    {"ctr_blocks", ctr_blocks, METH_VARARGS, ctr_blocks_doc},
    {"ctr_xor", ctr_xor, METH_VARARGS, ctr_xor_doc},
    {"put_headers", put_headers, METH_VARARGS, put_headers_doc},
    {"radiotap_fcs", radiotap_fcs, METH_VARARGS, radiotap_fcs_doc},
    {"dontneed", dontneed, METH_VARARGS, dontneed_doc},
    {"gather_ahead", gather_ahead, METH_VARARGS, gather_ahead_doc},
    {"tcp_options", tcp_options, METH_VARARGS, tcp_options_doc},
    {"pcap_walk", pcap_walk, METH_VARARGS, pcap_walk_doc},
    {"pcapng_walk", pcapng_walk, METH_VARARGS, pcapng_walk_doc},
    {"crc32_many", crc32_many, METH_VARARGS, crc32_many_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "parsers.decode._walk",
    "Record walks and batched CRC-32s for parsers (see parsers/accel.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__walk(void)
{
    build_crc_table();
    return PyModule_Create(&module);
}
