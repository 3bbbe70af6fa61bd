/* The TCP state machines of xlayer/metrics/tcp.py in C: one pass over a capture's column buffers.
 *
 * tcp.prepare's per-direction state (unwrapped sequence and acknowledgement numbers, "next expected",
 * zero-window probes, keep-alives, duplicate-ACK runs, the other direction's last ACK / window / ...)
 * is a chain in which each row's value depends on the rows before it in its connection: polars needs
 * a dozen window expressions and two permutations of the table for it, here it is one loop over the
 * rows in (connection, frame) order. Numbers come in and go out as int64 buffers with NUL64 standing
 * for null (no sequence number, time or id gets near it); flags as bytes. The GIL is released while
 * the loops run. Every index read from the caller's buffers is checked: a bad one is an error, never
 * a read outside them. tcp.py keeps the polars expressions for when this module is absent; the tests
 * compare both.
 *
 * tcp_state / rev_last: tcp.prepare's state machine. first_ack / count_upto: the first ACK covering a
 * segment and the retransmissions before a frame, by searches that gallop from the previous answer (the
 * queries come in about the order of the values). seq_track: flows.prepare's unwrapped sequence numbers
 * and highest end seen. numbered / first_distinct / key_gap / hash_ids: per-direction distinct IP ids, first
 * segment of each sequence number, 802.11 retries, flows' packet identities, by hashing in one pass instead
 * of sorting.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NUL64 INT64_MIN

/* flag bits of the `flags` buffer */
#define F_SYN 1
#define F_FIN 2
#define F_RST 4
#define F_ACK 8

/* rows of the input matrix */
enum { I_FRAME, I_TS, I_SEQ, I_ACK, I_LEN, I_WIN, I_IPID, I_TSVAL, N_IN };
/* rows of the int64 output matrix */
enum {
    O_SEQ_U, O_BASE, O_END_U, O_ACK_U, O_RBASE, O_NXT0, O_PREV_ACK, O_PREV_WIN, O_REV_WIN, O_NXT,
    O_NXT_TS, O_NXT_FRAME, O_NXT_IPID, O_NXT_TSVAL, O_DUPNUM, O_DUP_REF, O_REV_ACK, O_REV_DUP, O_REV_TS,
    O_PREV_CONN_TS, N_OUT
};
/* rows of the byte output matrix */
enum { B_ZWP, B_ADV, B_KEEPALIVE, B_DUP0, B_REV_KA, B_DUPACK, N_OUTB };
/* rows tcp_state steps through at a time in its own buffers (their inputs and outputs: a few hundred kB) */
#define BLOCK 2048
/* Distance between two columns of those buffers, in elements: not a multiple of 4 kB, so that one row's
 * twenty-odd values do not all fall in the same cache set (a power-of-two stride made every row's writes
 * evict each other: the kernel took twice as long on 1 M rows). */
#define STRIDE (BLOCK + 40)

/* Signed 32-bit difference (sequence arithmetic). */
static inline int64_t wrap32(int64_t x)
{
    int64_t v = x & 0xFFFFFFFFLL;
    return v >= (1LL << 31) ? v - (1LL << 32) : v;
}

/* What one direction of a connection carries from row to row. */
typedef struct {
    int64_t first_seq, a0, cur_seq, last_seq, ack_last_raw, ack_cum, cm_end, last_ack_u, last_win,
        last_win_nn, e_cm, adv_ts, adv_frame, adv_ipid, adv_tsval, run, last_nondup, last_dupnum, last_ts_nn;
    uint8_t seen, first_syn, rows, ack_seen, prev_zwp, last_ka;
} Dir;

static void dir_reset(Dir *d)
{
    memset(d, 0, sizeof *d);
    d->a0 = d->last_ack_u = d->last_win = d->last_win_nn = d->e_cm = NUL64;
    d->adv_ts = d->adv_frame = d->adv_ipid = d->adv_tsval = d->last_nondup = d->last_dupnum = NUL64;
    d->last_ts_nn = NUL64;
}

static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* One row (index i) of direction `s`, the other direction of its connection being `o`. */
static void state_row(int64_t i, Py_ssize_t n, Dir *s, const Dir *o, const int64_t *in, uint8_t fl,
                      int64_t *out, uint8_t *outb)
{
    const int64_t frame = in[I_FRAME * n + i], ts = in[I_TS * n + i], raw = in[I_SEQ * n + i];
    const int64_t ack = in[I_ACK * n + i], len = in[I_LEN * n + i], win = in[I_WIN * n + i];
    const int syn = (fl & F_SYN) != 0, fin = (fl & F_FIN) != 0, ackf = (fl & F_ACK) != 0;
    const int plain = (fl & (F_SYN | F_FIN | F_RST)) == 0;
#define OUT(k) out[(k) * n + i]
#define OUTB(k) outb[(k) * n + i]
    int64_t seq_u = s->rows ? s->cur_seq + wrap32(raw - s->last_seq) : raw;
    int64_t end_u = seq_u + len + syn + fin;
    OUT(O_SEQ_U) = seq_u;
    OUT(O_BASE) = s->first_seq - (s->first_syn ? 0 : 1);
    OUT(O_END_U) = end_u;
    /* ACK numbers: the other direction's first sequence number anchors the first one (tcp.prepare) */
    int64_t ack_u = NUL64;
    if (ackf && s->a0 != NUL64) {
        if (ack != NUL64) {
            if (s->ack_seen)
                s->ack_cum += wrap32(ack - s->ack_last_raw);
            s->ack_seen = 1;
            s->ack_last_raw = ack;
        }
        int64_t anchor = o->seen ? o->first_seq + wrap32(s->a0 - o->first_seq) : s->a0;
        ack_u = anchor + s->ack_cum;
    }
    OUT(O_ACK_U) = ack_u;
    OUT(O_RBASE) = o->seen ? o->first_seq - (o->first_syn ? 0 : 1) : (s->a0 == NUL64 ? NUL64 : s->a0 - 1);
    int64_t nxt0 = s->rows ? s->cm_end : NUL64;
    int64_t prev_ack = s->last_ack_u, prev_win = s->rows ? s->last_win : NUL64, rev_win = o->last_win_nn;
    OUT(O_NXT0) = nxt0;
    OUT(O_PREV_ACK) = prev_ack;
    OUT(O_PREV_WIN) = prev_win;
    OUT(O_REV_WIN) = rev_win;
    int zwp = len == 1 && nxt0 != NUL64 && seq_u == nxt0 && rev_win == 0;
    /* polars' cumulative max leaves a null where its input is null: the row after a probe sees none */
    int64_t nxt = (!s->rows || s->prev_zwp) ? NUL64 : s->e_cm;
    int adv = !zwp && (nxt == NUL64 || end_u > nxt);
    OUT(O_NXT) = nxt;
    OUT(O_NXT_TS) = s->adv_ts;
    OUT(O_NXT_FRAME) = s->adv_frame;
    OUT(O_NXT_IPID) = s->adv_ipid;
    OUT(O_NXT_TSVAL) = s->adv_tsval;
    int keepalive = len <= 1 && nxt != NUL64 && seq_u == nxt - 1 && plain;
    int dup0 = len == 0 && win != NUL64 && win != 0 && win == prev_win && nxt != NUL64 && seq_u == nxt
        && ack_u != NUL64 && ack_u == prev_ack && plain;
    int rev_ka = o->last_ka;
    int dupack = dup0 && !rev_ka;
    if (ack_u == NUL64 || prev_ack == NUL64 || ack_u != prev_ack)
        s->run = 0;    /* a new run of one ACK value */
    s->run += dupack;
    if (!dupack && frame != NUL64)
        s->last_nondup = frame;
    OUT(O_DUPNUM) = s->run;
    OUT(O_DUP_REF) = s->last_nondup;
    OUT(O_REV_ACK) = o->last_ack_u;
    OUT(O_REV_DUP) = o->last_dupnum;
    OUT(O_REV_TS) = o->last_ts_nn;
    OUTB(B_ZWP) = (uint8_t)zwp;
    OUTB(B_ADV) = (uint8_t)adv;
    OUTB(B_KEEPALIVE) = (uint8_t)keepalive;
    OUTB(B_DUP0) = (uint8_t)dup0;
    OUTB(B_REV_KA) = (uint8_t)rev_ka;
    OUTB(B_DUPACK) = (uint8_t)dupack;
#undef OUT
#undef OUTB
    /* the state the next rows see */
    if (adv) {
        if (ts != NUL64) s->adv_ts = ts;
        if (frame != NUL64) s->adv_frame = frame;
        if (in[I_IPID * n + i] != NUL64) s->adv_ipid = in[I_IPID * n + i];
        if (in[I_TSVAL * n + i] != NUL64) s->adv_tsval = in[I_TSVAL * n + i];
    }
    s->cm_end = s->rows ? max64(s->cm_end, end_u) : end_u;
    if (!zwp)
        s->e_cm = s->e_cm == NUL64 ? end_u : max64(s->e_cm, end_u);
    s->prev_zwp = (uint8_t)zwp;
    if (ack_u != NUL64) s->last_ack_u = ack_u;
    s->last_win = win;
    if (win != NUL64) s->last_win_nn = win;
    if (ts != NUL64) s->last_ts_nn = ts;
    s->last_ka = (uint8_t)keepalive;
    s->last_dupnum = s->run;
    s->cur_seq = seq_u;
    s->last_seq = raw;
    s->rows = 1;
}

/* Check the row order and connection numbers: every index inside the buffers, connections in runs. */
static int order_ok(const int64_t *order, const int64_t *cid, const uint8_t *dir, Py_ssize_t n, int64_t nconn)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t i = order[k];
        if (i < 0 || i >= n || cid[i] < 0 || cid[i] >= nconn || dir[i] > 1)
            return 0;
    }
    return 1;
}

static int sizes_ok(Py_buffer *b, Py_ssize_t want)
{
    return b->len == want;
}

PyDoc_STRVAR(tcp_state_doc,
"tcp_state(order, cid, dir, flags, inp, out, outb, nconn)\n\n"
"Fill `out` (int64, N_OUT rows of n) and `outb` (uint8, N_OUTB rows) with tcp.prepare's per-row state.\n"
"order: int64 row indices in (connection, frame) order; cid: int64 connection number per row (0..nconn-1,\n"
"each connection's rows contiguous in `order`); dir: uint8 0 (a) / 1 (b); flags: uint8 SYN 1, FIN 2, RST 4,\n"
"ACK 8; inp: int64 columns frame, ts_ns, raw seq, raw ack, len, window, IP id, TSval (null: INT64_MIN).\n"
"inp and out are sequences of one buffer per column (rows of a 2-D array do): the caller's columns are\n"
"read where they are and each output column is its own buffer, not a copy out of one matrix.");

/* Get `want` int64 column buffers of n rows each from the sequence `seq` into `bufs` (`*got`: how many are
 * held, to release); 0 with an exception set when it is no such sequence. */
static int get_columns(PyObject *seq, int want, Py_ssize_t n, int flags, Py_buffer *bufs, int *got)
{
    PyObject *fast = PySequence_Fast(seq, "tcp_state: a sequence of column buffers expected");
    if (!fast)
        return 0;
    int ok = PySequence_Fast_GET_SIZE(fast) == want;
    for (int k = 0; ok && k < want; k++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, k), &bufs[k], flags) < 0) {
            Py_DECREF(fast);
            return 0;
        }
        (*got)++;
        ok = bufs[k].len == 8 * n;
    }
    Py_DECREF(fast);
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "tcp_state: buffer sizes do not match");
    return ok;
}

static PyObject *tcp_state(PyObject *self, PyObject *args)
{
    Py_buffer ov, cv, dv, fv, outbv, iv[N_IN], outv[N_OUT];
    PyObject *inseq, *outseq;
    long long nconn;
    int nin = 0, nout = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*y*OOw*L", &ov, &cv, &dv, &fv, &inseq, &outseq, &outbv, &nconn))
        return NULL;
    Py_ssize_t n = dv.len;
    PyObject *res = NULL;
    Dir *st = NULL;
    int64_t *bin = NULL, *bout = NULL;
    uint8_t *boutb = NULL;
    if (nconn < 0 || nconn > n || !sizes_ok(&ov, 8 * n) || !sizes_ok(&cv, 8 * n) || !sizes_ok(&fv, n)
        || !sizes_ok(&outbv, N_OUTB * n)) {
        PyErr_SetString(PyExc_ValueError, "tcp_state: buffer sizes do not match");
        goto done;
    }
    if (!get_columns(inseq, N_IN, n, PyBUF_SIMPLE, iv, &nin)
        || !get_columns(outseq, N_OUT, n, PyBUF_WRITABLE, outv, &nout))
        goto done;
    const int64_t *order = ov.buf, *cid = cv.buf, *in[N_IN];
    const uint8_t *dir = dv.buf, *flags = fv.buf;
    int64_t *out[N_OUT];
    for (int c = 0; c < N_IN; c++)
        in[c] = iv[c].buf;
    for (int c = 0; c < N_OUT; c++)
        out[c] = outv[c].buf;
    uint8_t *outb = outbv.buf;
    int ok;
    st = malloc(sizeof(Dir) * (size_t)(2 * nconn + 1));
    bin = malloc(sizeof(int64_t) * N_IN * STRIDE);
    bout = malloc(sizeof(int64_t) * N_OUT * STRIDE);
    boutb = malloc(N_OUTB * STRIDE);
    if (!st || !bin || !bout || !boutb) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    ok = order_ok(order, cid, dir, n, nconn);
    if (ok) {
        for (int64_t s = 0; s < 2 * nconn; s++)
            dir_reset(&st[s]);
        /* each direction's first row (its first frame) and first ACK number: what anchors the others */
        for (Py_ssize_t k = 0; k < n; k++) {
            int64_t i = order[k];
            Dir *d = &st[cid[i] * 2 + dir[i]];
            if (!d->seen) {
                d->seen = 1;
                d->first_seq = in[I_SEQ][i];
                d->first_syn = (flags[i] & F_SYN) != 0;
            }
            if (d->a0 == NUL64 && (flags[i] & F_ACK) && in[I_ACK][i] != NUL64)
                d->a0 = in[I_ACK][i];
        }
        /* The rows are visited in (connection, frame) order, the buffers hold them in (connection, direction,
         * frame) order: read and written in place, each row touches some thirty columns at two positions
         * each. A block of rows is gathered column by column into small buffers, stepped through there,
         * and its outputs scattered back column by column (about 15 % less time on 1.2 M rows; the rest
         * is mostly the first touch of the fresh output pages). */
        int64_t prev_cid = -1, prev_ts = NUL64;
        for (Py_ssize_t k0 = 0; k0 < n; k0 += BLOCK) {
            const Py_ssize_t kn = n - k0 < BLOCK ? n - k0 : BLOCK;
            const int64_t *ord = order + k0;
            for (int c = 0; c < N_IN; c++) {
                const int64_t *src = in[c];
                int64_t *dst = bin + (Py_ssize_t)c * STRIDE;
                for (Py_ssize_t j = 0; j < kn; j++)
                    dst[j] = src[ord[j]];
            }
            for (Py_ssize_t j = 0; j < kn; j++) {
                int64_t i = ord[j], c = cid[i];
                state_row(j, STRIDE, &st[c * 2 + dir[i]], &st[c * 2 + 1 - dir[i]], bin, flags[i], bout, boutb);
                bout[O_PREV_CONN_TS * STRIDE + j] = c == prev_cid ? prev_ts : NUL64;
                prev_cid = c;
                prev_ts = bin[I_TS * STRIDE + j];
            }
            for (int c = 0; c < N_OUT; c++) {
                const int64_t *src = bout + (Py_ssize_t)c * STRIDE;
                int64_t *dst = out[c];
                for (Py_ssize_t j = 0; j < kn; j++)
                    dst[ord[j]] = src[j];
            }
            for (int c = 0; c < N_OUTB; c++) {
                const uint8_t *src = boutb + (Py_ssize_t)c * STRIDE;
                uint8_t *dst = outb + (Py_ssize_t)c * n;
                for (Py_ssize_t j = 0; j < kn; j++)
                    dst[ord[j]] = src[j];
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "tcp_state: row index, connection or direction out of range");
        goto done;
    }
    res = Py_NewRef(Py_None);
done:
    free(st);
    free(bin);
    free(bout);
    free(boutb);
    PyBuffer_Release(&ov);
    PyBuffer_Release(&cv);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&fv);
    for (int c = 0; c < nin; c++)
        PyBuffer_Release(&iv[c]);
    for (int c = 0; c < nout; c++)
        PyBuffer_Release(&outv[c]);
    PyBuffer_Release(&outbv);
    return res;
}

PyDoc_STRVAR(rev_last_doc,
"rev_last(order, cid, dir, vals, out, nconn)\n\n"
"Fill `out` (int64) with, per row, the last non-null value of `vals` (int64, null INT64_MIN) in the other\n"
"direction of its connection before it (rows in `order`, as tcp_state's); INT64_MIN when none.");

static PyObject *rev_last(PyObject *self, PyObject *args)
{
    Py_buffer ov, cv, dv, vv, outv;
    long long nconn;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*L", &ov, &cv, &dv, &vv, &outv, &nconn))
        return NULL;
    Py_ssize_t n = dv.len;
    PyObject *res = NULL;
    int ok = 0;
    if (nconn < 0 || nconn > n || !sizes_ok(&ov, 8 * n) || !sizes_ok(&cv, 8 * n) || !sizes_ok(&vv, 8 * n)
        || !sizes_ok(&outv, 8 * n)) {
        PyErr_SetString(PyExc_ValueError, "rev_last: buffer sizes do not match");
        goto done;
    }
    const int64_t *order = ov.buf, *cid = cv.buf, *vals = vv.buf;
    const uint8_t *dir = dv.buf;
    int64_t *out = outv.buf;
    Py_BEGIN_ALLOW_THREADS
    ok = order_ok(order, cid, dir, n, nconn);
    if (ok) {
        int64_t prev_cid = -1, last[2] = {NUL64, NUL64};
        for (Py_ssize_t k = 0; k < n; k++) {
            int64_t i = order[k];
            if (cid[i] != prev_cid) {
                last[0] = last[1] = NUL64;
                prev_cid = cid[i];
            }
            out[i] = last[1 - dir[i]];
            if (vals[i] != NUL64)
                last[dir[i]] = vals[i];
        }
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "rev_last: row index, connection or direction out of range");
        goto done;
    }
    res = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&ov);
    PyBuffer_Release(&cv);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&vv);
    PyBuffer_Release(&outv);
    return res;
}

/* First index in [lo, hi) whose value is above `key` (strict) or at least `key` (values ascending); hi when
 * none. The search starts at `hint` (lo <= hint <= hi) and gallops from there: queries that come in about
 * the order of the values (segments and ACKs in frame order) cost a few steps instead of a full search. */
static int64_t bound(const int64_t *v, int64_t lo, int64_t hi, int64_t hint, int64_t key, int strict)
{
#define PASS(x) (strict ? (x) > key : (x) >= key)
    int64_t a, b, step = 1;
    hint = hint < lo ? lo : hint;
    if (hint >= hi || PASS(v[hint])) {           /* the answer is at or below hint (hi: past every value) */
        hint = hint > hi ? hi : hint;
        b = hint;
        a = hint - 1;
        while (a >= lo && PASS(v[a])) {
            b = a;
            a -= step;
            step <<= 1;
        }
        a = a < lo ? lo : a + 1;                    /* v[a - 1] fails (or a == lo), v[b] passes */
    } else {                                         /* the answer is above hint */
        a = hint + 1;
        b = a;
        while (b < hi && !PASS(v[b])) {
            a = b + 1;
            b += step;
            step <<= 1;
        }
        if (b > hi)
            b = hi;
    }
    while (a < b) {                                  /* the answer is in [a, b] */
        int64_t mid = a + (b - a) / 2;
        if (PASS(v[mid])) b = mid; else a = mid + 1;
    }
    return a;
#undef PASS
}

PyDoc_STRVAR(first_ack_doc,
"first_ack(off, frame, ack_u, cm, q_grp, q_frame, q_need, out)\n\n"
"ACKs in groups (one per acknowledged direction; group g is rows off[g]..off[g+1], in frame order):\n"
"fill `cm` with each group's running maximum of ack_u. Then per query (group q_grp, -1: none; frame;\n"
"sequence number needed; INT64_MIN: null) put in `out` the index of the first ACK after the frame when\n"
"its running maximum reaches the need, else the first ACK whose running maximum does (earlier ones too\n"
"when no ACK follows: tcp._first_ack's rule), -1 when none. All int64.");

static PyObject *first_ack(PyObject *self, PyObject *args)
{
    Py_buffer offv, fv, av, cmv, gv, qfv, qnv, outv;
    if (!PyArg_ParseTuple(args, "y*y*y*w*y*y*y*w*", &offv, &fv, &av, &cmv, &gv, &qfv, &qnv, &outv))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t na = fv.len / 8, ng = offv.len / 8 - 1, nq = gv.len / 8;
    int ok = 0;
    if (ng < 0 || fv.len % 8 || !sizes_ok(&av, 8 * na) || !sizes_ok(&cmv, 8 * na) || gv.len % 8
        || !sizes_ok(&qfv, 8 * nq) || !sizes_ok(&qnv, 8 * nq) || !sizes_ok(&outv, 8 * nq)) {
        PyErr_SetString(PyExc_ValueError, "first_ack: buffer sizes do not match");
        goto done;
    }
    const int64_t *off = offv.buf, *frame = fv.buf, *ack = av.buf, *grp = gv.buf, *qf = qfv.buf, *qn = qnv.buf;
    int64_t *cm = cmv.buf, *out = outv.buf;
    Py_BEGIN_ALLOW_THREADS
    ok = off[0] == 0 && off[ng] == na;
    for (Py_ssize_t g = 0; ok && g < ng; g++)
        ok = off[g] <= off[g + 1];
    for (Py_ssize_t g = 0; ok && g < ng; g++)
        for (int64_t k = off[g]; k < off[g + 1]; k++)
            cm[k] = k == off[g] ? ack[k] : max64(cm[k - 1], ack[k]);
    int64_t last_g = -1, h1 = 0, h2 = 0;    /* the previous query's group and answers: the next search's start */
    for (Py_ssize_t q = 0; ok && q < nq; q++) {
        int64_t g = grp[q], hit = -1;
        if (g < -1 || g >= ng) {
            ok = 0;
            break;
        }
        if (g >= 0 && qn[q] != NUL64) {
            int64_t lo = off[g], hi = off[g + 1];
            if (g != last_g) {
                h1 = h2 = lo;
                last_g = g;
            }
            int64_t j = qf[q] == NUL64 ? hi : (h1 = bound(frame, lo, hi, h1, qf[q], 1));
            if (j < hi && cm[j] >= qn[q])
                hit = j;
            else {
                int64_t j2 = h2 = bound(cm, lo, hi, h2, qn[q], 0);
                hit = j2 < hi ? j2 : -1;
            }
        }
        out[q] = hit;
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "first_ack: group offsets or numbers out of range");
        goto done;
    }
    res = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&offv);
    PyBuffer_Release(&fv);
    PyBuffer_Release(&av);
    PyBuffer_Release(&cmv);
    PyBuffer_Release(&gv);
    PyBuffer_Release(&qfv);
    PyBuffer_Release(&qnv);
    PyBuffer_Release(&outv);
    return res;
}

/* Slot of `key` (>= 0) in an open-addressing table of `cap` (a power of two) keys, -1 marking free ones;
 * *fresh set when it was not there. The table never fills: cap is over twice the rows. */
static int64_t slot_of(int64_t *keys, int64_t cap, int64_t key, int *fresh)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ULL;
    int64_t k = (int64_t)(h >> 17) & (cap - 1);
    while (keys[k] != -1 && keys[k] != key)
        k = (k + 1) & (cap - 1);
    *fresh = keys[k] == -1;
    keys[k] = key;
    return k;
}

PyDoc_STRVAR(seq_track_doc,
"seq_track(grp, seq, span, seq_u, prev)\n\n"
"Rows in frame order, grouped by `grp` (int64 >= 0; -1: not TCP, outputs null): fill `seq_u` with the\n"
"32-bit sequence numbers unwrapped per group (the first raw value plus signed 32-bit steps) and `prev`\n"
"with the highest seq_u + span of the group's rows before (INT64_MIN: null), as flows.prepare's windows.");

static PyObject *seq_track(PyObject *self, PyObject *args)
{
    Py_buffer gv, sv, spv, uv, pv;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*", &gv, &sv, &spv, &uv, &pv))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = gv.len / 8;
    int64_t cap = 16;
    int64_t *keys = NULL, *st = NULL;
    if (gv.len % 8 || !sizes_ok(&sv, 8 * n) || !sizes_ok(&spv, 8 * n) || !sizes_ok(&uv, 8 * n) || !sizes_ok(&pv, 8 * n)) {
        PyErr_SetString(PyExc_ValueError, "seq_track: buffer sizes do not match");
        goto done;
    }
    while (cap < 2 * (int64_t)n + 2)
        cap <<= 1;
    keys = malloc(sizeof(int64_t) * (size_t)cap);
    st = malloc(sizeof(int64_t) * 3 * (size_t)cap);   /* last raw, last seq_u, highest end */
    if (!keys || !st) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *grp = gv.buf, *seq = sv.buf, *span = spv.buf;
    int64_t *seq_u = uv.buf, *prev = pv.buf;
    Py_BEGIN_ALLOW_THREADS
    memset(keys, 0xFF, sizeof(int64_t) * (size_t)cap);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (grp[i] < 0 || seq[i] == NUL64) {
            seq_u[i] = prev[i] = NUL64;
            continue;
        }
        int fresh;
        int64_t *g = st + 3 * slot_of(keys, cap, grp[i], &fresh);
        int64_t u = fresh ? seq[i] : g[1] + wrap32(seq[i] - g[0]);
        int64_t end = u + span[i];
        seq_u[i] = u;
        prev[i] = fresh ? NUL64 : g[2];
        g[0] = seq[i];
        g[1] = u;
        g[2] = fresh ? end : max64(g[2], end);
    }
    Py_END_ALLOW_THREADS
    res = Py_NewRef(Py_None);
done:
    free(keys);
    free(st);
    PyBuffer_Release(&gv);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&spv);
    PyBuffer_Release(&uv);
    PyBuffer_Release(&pv);
    return res;
}

/* Whether the ng + 1 group offsets run from 0 to n without going back (else ValueError naming `fn`); the
 * largest group's size in *most. */
static int groups_ok(const int64_t *off, Py_ssize_t ng, Py_ssize_t n, const char *fn, int64_t *most)
{
    int ok = off[0] == 0 && off[ng] == n;
    int64_t m = 0;
    for (Py_ssize_t g = 0; ok && g < ng; g++) {
        ok = off[g] <= off[g + 1];
        m = ok && off[g + 1] - off[g] > m ? off[g + 1] - off[g] : m;
    }
    if (!ok)
        PyErr_Format(PyExc_ValueError, "%s: group offsets out of range", fn);
    *most = m;
    return ok;
}

/* The open-addressing table size for a group of `size` keys: a power of two, at most half full. */
static int64_t table_size(int64_t size)
{
    int64_t c = 16;
    while (c < 2 * size + 2)
        c <<= 1;
    return c;
}

PyDoc_STRVAR(numbered_doc,
"numbered(off, vals, out)\n\n"
"Rows in groups (group g: rows off[g]..off[g+1]); vals int64 (INT64_MIN: null, one value of its own).\n"
"Fill `out` (uint8, per row) with whether its group holds at least two distinct values and at least a\n"
"quarter as many distinct values as rows: tcp's test that a sender numbers its IP packets.");

static PyObject *numbered(PyObject *self, PyObject *args)
{
    Py_buffer offv, vv, outv;
    if (!PyArg_ParseTuple(args, "y*y*w*", &offv, &vv, &outv))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = vv.len / 8, ng = offv.len / 8 - 1;
    int64_t *keys = NULL;
    int ok = 0;
    if (ng < 0 || vv.len % 8 || !sizes_ok(&outv, n)) {
        PyErr_SetString(PyExc_ValueError, "numbered: buffer sizes do not match");
        goto done;
    }
    const int64_t *off = offv.buf, *vals = vv.buf;
    uint8_t *out = outv.buf;
    int64_t most;
    ok = groups_ok(off, ng, n, "numbered", &most);
    if (!ok)
        goto done;
    int64_t cap = table_size(most);
    keys = malloc(sizeof(int64_t) * (size_t)cap);
    if (!keys) {
        PyErr_NoMemory();
        goto done;
    }
    int bad = 0;
    uint64_t small[1024];
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g < ng && !bad; g++) {
        int64_t size = off[g + 1] - off[g], c = table_size(size), distinct = 0, has_null = 0;
        int cleared = 0;
        memset(small, 0, sizeof small);
        for (int64_t i = off[g]; i < off[g + 1]; i++) {
            if (vals[i] == NUL64) {
                has_null = 1;
                continue;
            }
            int fresh;
            if (vals[i] < 0) {                       /* the table's free mark: ids are never negative */
                bad = 1;
                break;
            }
            if (vals[i] < 65536) {                   /* IPv4 ids: a bitmap that stays in the cache */
                uint64_t bit = 1ULL << (vals[i] & 63);
                distinct += (small[vals[i] >> 6] & bit) == 0;
                small[vals[i] >> 6] |= bit;
                continue;
            }
            if (!cleared) {                          /* this group's table: cleared in proportion to it */
                memset(keys, 0xFF, sizeof(int64_t) * (size_t)c);
                cleared = 1;
            }
            slot_of(keys, c, vals[i], &fresh);
            distinct += fresh;
        }
        distinct += has_null;
        uint8_t v = distinct >= 2 && distinct * 4 >= size;
        memset(out + off[g], v, (size_t)size);
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "numbered: negative value");
        goto done;
    }
    res = Py_NewRef(Py_None);
done:
    free(keys);
    PyBuffer_Release(&offv);
    PyBuffer_Release(&vv);
    PyBuffer_Release(&outv);
    return res;
}

PyDoc_STRVAR(key_gap_doc,
"key_gap(keys, ts, gap)\n\n"
"Rows in order; keys: any int64 (an MPDU's identity, a hash); ts: int64 (INT64_MIN: null). Fill `gap` with\n"
"each row's ts minus that of the previous row with the same key (INT64_MIN: first of its key, or a null\n"
"time): how soon an 802.11 frame repeats one seen before.");

static PyObject *key_gap(PyObject *self, PyObject *args)
{
    Py_buffer kv, tv, gv;
    if (!PyArg_ParseTuple(args, "y*y*w*", &kv, &tv, &gv))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = kv.len / 8;
    int64_t cap = 16, *keys = NULL, *last = NULL;
    uint8_t *used = NULL;
    if (kv.len % 8 || !sizes_ok(&tv, 8 * n) || !sizes_ok(&gv, 8 * n)) {
        PyErr_SetString(PyExc_ValueError, "key_gap: buffer sizes do not match");
        goto done;
    }
    while (cap < 2 * (int64_t)n + 2)
        cap <<= 1;
    keys = malloc(sizeof(int64_t) * (size_t)cap);
    last = malloc(sizeof(int64_t) * (size_t)cap);
    used = calloc((size_t)cap, 1);
    if (!keys || !last || !used) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *key = kv.buf, *ts = tv.buf;
    int64_t *gap = gv.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h = (uint64_t)key[i] * 0x9E3779B97F4A7C15ULL;
        int64_t k = (int64_t)(h >> 17) & (cap - 1);
        while (used[k] && keys[k] != key[i])       /* any key value: occupancy kept apart */
            k = (k + 1) & (cap - 1);
        if (used[k])
            gap[i] = ts[i] == NUL64 || last[k] == NUL64 ? NUL64 : ts[i] - last[k];
        else
            gap[i] = NUL64;
        used[k] = 1;
        keys[k] = key[i];
        last[k] = ts[i];
    }
    Py_END_ALLOW_THREADS
    res = Py_NewRef(Py_None);
done:
    free(keys);
    free(last);
    free(used);
    PyBuffer_Release(&kv);
    PyBuffer_Release(&tv);
    PyBuffer_Release(&gv);
    return res;
}

PyDoc_STRVAR(count_upto_doc,
"count_upto(off, vals, q_grp, q_val, out)\n\n"
"Values in groups (group g: off[g]..off[g+1], ascending): fill `out` with, per query, how many values of\n"
"group q_grp (-1: none, 0) are at most q_val (INT64_MIN: null, 0). All int64.");

static PyObject *count_upto(PyObject *self, PyObject *args)
{
    Py_buffer offv, vv, gv, qv, outv;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &offv, &vv, &gv, &qv, &outv))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t nv = vv.len / 8, ng = offv.len / 8 - 1, nq = gv.len / 8;
    int ok = 0;
    if (ng < 0 || vv.len % 8 || gv.len % 8 || !sizes_ok(&qv, 8 * nq) || !sizes_ok(&outv, 8 * nq)) {
        PyErr_SetString(PyExc_ValueError, "count_upto: buffer sizes do not match");
        goto done;
    }
    const int64_t *off = offv.buf, *vals = vv.buf, *grp = gv.buf, *qval = qv.buf;
    int64_t *out = outv.buf;
    Py_BEGIN_ALLOW_THREADS
    ok = off[0] == 0 && off[ng] == nv;
    for (Py_ssize_t g = 0; ok && g < ng; g++)
        ok = off[g] <= off[g + 1];
    int64_t last_g = -1, hint = 0;
    for (Py_ssize_t q = 0; ok && q < nq; q++) {
        int64_t g = grp[q];
        if (g < -1 || g >= ng) {
            ok = 0;
            break;
        }
        if (g < 0 || qval[q] == NUL64) {
            out[q] = 0;
            continue;
        }
        if (g != last_g) {
            hint = off[g];
            last_g = g;
        }
        hint = bound(vals, off[g], off[g + 1], hint, qval[q], 1);
        out[q] = hint - off[g];
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "count_upto: group offsets or numbers out of range");
        goto done;
    }
    res = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&offv);
    PyBuffer_Release(&vv);
    PyBuffer_Release(&gv);
    PyBuffer_Release(&qv);
    PyBuffer_Release(&outv);
    return res;
}

PyDoc_STRVAR(first_distinct_doc,
"first_distinct(off, vals, out)\n\n"
"Rows in groups (group g: off[g]..off[g+1]); vals int64 (any). Fill `out` (uint8) with whether the row is\n"
"the first of its group holding its value.");

static PyObject *first_distinct(PyObject *self, PyObject *args)
{
    Py_buffer offv, vv, outv;
    if (!PyArg_ParseTuple(args, "y*y*w*", &offv, &vv, &outv))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = vv.len / 8, ng = offv.len / 8 - 1;
    int64_t *keys = NULL;
    uint8_t *used = NULL;
    if (ng < 0 || vv.len % 8 || !sizes_ok(&outv, n)) {
        PyErr_SetString(PyExc_ValueError, "first_distinct: buffer sizes do not match");
        goto done;
    }
    const int64_t *off = offv.buf, *vals = vv.buf;
    uint8_t *out = outv.buf;
    int64_t most;
    if (!groups_ok(off, ng, n, "first_distinct", &most))
        goto done;
    int64_t cap = table_size(most);
    keys = malloc(sizeof(int64_t) * (size_t)cap);
    used = malloc((size_t)cap);
    if (!keys || !used) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g < ng; g++) {
        int64_t c = table_size(off[g + 1] - off[g]);  /* this group's table: cleared in proportion to it */
        memset(used, 0, (size_t)c);
        for (int64_t i = off[g]; i < off[g + 1]; i++) {
            uint64_t h = (uint64_t)vals[i] * 0x9E3779B97F4A7C15ULL;
            int64_t k = (int64_t)(h >> 17) & (c - 1);
            while (used[k] && keys[k] != vals[i])
                k = (k + 1) & (c - 1);
            out[i] = !used[k];
            used[k] = 1;
            keys[k] = vals[i];
        }
    }
    Py_END_ALLOW_THREADS
    res = Py_NewRef(Py_None);
done:
    free(keys);
    free(used);
    PyBuffer_Release(&offv);
    PyBuffer_Release(&vv);
    PyBuffer_Release(&outv);
    return res;
}

PyDoc_STRVAR(hash_ids_doc,
"hash_ids(keys, ids, rep) -> n\n\n"
"Rows in order; keys: int64 (any value: a 64-bit hash). Fill `ids` with each row's key numbered 0..n-1 in\n"
"the order the keys first appear and `rep` with the row where its key first appears; return n, the\n"
"number of distinct keys: flows' packet identities counted and numbered in one pass, without a sort.");

static PyObject *hash_ids(PyObject *self, PyObject *args)
{
    Py_buffer kv, iv, rv;
    if (!PyArg_ParseTuple(args, "y*w*w*", &kv, &iv, &rv))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = kv.len / 8;
    int64_t cap = 16, *slots = NULL, next = 0;
    if (kv.len % 8 || !sizes_ok(&iv, 8 * n) || !sizes_ok(&rv, 8 * n)) {
        PyErr_SetString(PyExc_ValueError, "hash_ids: buffer sizes do not match");
        goto done;
    }
    while (cap < 2 * (int64_t)n + 2)
        cap <<= 1;
    /* each slot holds the first row of its key (-1: free): the key itself is read from `keys` */
    slots = malloc(sizeof(int64_t) * (size_t)cap);
    if (!slots) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *key = kv.buf;
    int64_t *ids = iv.buf, *rep = rv.buf;
    Py_BEGIN_ALLOW_THREADS
    memset(slots, 0xFF, sizeof(int64_t) * (size_t)cap);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h = (uint64_t)key[i] * 0x9E3779B97F4A7C15ULL;
        int64_t k = (int64_t)(h >> 17) & (cap - 1);
        while (slots[k] != -1 && key[slots[k]] != key[i])
            k = (k + 1) & (cap - 1);
        if (slots[k] == -1) {
            slots[k] = i;
            ids[i] = next++;
            rep[i] = i;
        } else {
            rep[i] = slots[k];
            ids[i] = ids[slots[k]];
        }
    }
    Py_END_ALLOW_THREADS
    res = PyLong_FromLongLong(next);
done:
    free(slots);
    PyBuffer_Release(&kv);
    PyBuffer_Release(&iv);
    PyBuffer_Release(&rv);
    return res;
}

static PyMethodDef methods[] = {
    {"tcp_state", tcp_state, METH_VARARGS, tcp_state_doc},
    {"rev_last", rev_last, METH_VARARGS, rev_last_doc},
    {"first_ack", first_ack, METH_VARARGS, first_ack_doc},
    {"seq_track", seq_track, METH_VARARGS, seq_track_doc},
    {"numbered", numbered, METH_VARARGS, numbered_doc},
    {"key_gap", key_gap, METH_VARARGS, key_gap_doc},
    {"count_upto", count_upto, METH_VARARGS, count_upto_doc},
    {"first_distinct", first_distinct, METH_VARARGS, first_distinct_doc},
    {"hash_ids", hash_ids, METH_VARARGS, hash_ids_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "xlayer.metrics._tcpk",
    "TCP state machines over column buffers for xlayer.metrics.tcp / flows.", -1, methods,
};

PyMODINIT_FUNC PyInit__tcpk(void)
{
    return PyModule_Create(&module);
}
