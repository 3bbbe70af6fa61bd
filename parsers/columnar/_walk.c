/* The two per-record loops of reading a capture that numpy cannot vectorize, in C.
 *
 * Walking record headers is a chain (each record's length says where the next one starts) and a
 * frame check sequence is one CRC-32 per frame: in Python both cost a few hundred ns per record and
 * hold the GIL. Here they cost a few ns per record, and the CRCs run with the GIL released, so that
 * another thread decodes meanwhile. Everything else stays numpy. parsers/accel.py loads this
 * module; without it the pure-Python loops give the same results (tests compare them).
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

static PyMethodDef methods[] = {
    {"radiotap_fcs", radiotap_fcs, METH_VARARGS, radiotap_fcs_doc},
    {"dontneed", dontneed, METH_VARARGS, dontneed_doc},
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
