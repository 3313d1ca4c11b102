/*
 * Compiled per-function passes of the fair-share function build (pooltree/fairshare/functions.py).
 *
 * Each level of the pool tree builds its pools' FairShareByFitFactor as the sum of the children's
 * FairShareBySuggestion functions, then turns it into FairShareBySuggestion (with MaxFitFactorBySuggestion
 * carried along). The numpy versions in functions.py do this for a whole level with ~40 array passes over
 * every breakpoint of the level's subtrees; here the same rules run function by function in one pass.
 * functions.py stays the reference: tests compare both on random batches, and the golden regression runs
 * with either. Arguments are C-contiguous float64/int64 buffers (the Python wrappers guarantee it); outputs
 * go into caller-allocated buffers sized by the bounds the wrappers compute, and the number of points
 * written is returned.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define R 5
#define LIMIT_TOLERANCE 1e-12
#define COMPRESS_EPSILON 1e-12
#define ZERO_SUGGESTION 1e-15
#define FULL_SUGGESTION_TOLERANCE 1e-12

/* ---------------------------------------------------------------------------------------------------- */
/* Buffers                                                                                              */

typedef struct {
    Py_buffer view;
    int held;
} Buffer;

/* Item kinds of the buffers: native float64 ('d') and native int64 ('l' or 'q' of 8 bytes). */
#define FLOAT64 'd'
#define INT64 'q'

/* Whether a buffer format string (struct module syntax) is one native item of `kind`. */
static int native_format(const char *format, Py_ssize_t itemsize, char kind) {
    if (format == NULL || itemsize != 8) return 0;
    if (format[0] == '@' || format[0] == '=') format++;
#if PY_LITTLE_ENDIAN
    else if (format[0] == '<') format++;
#else
    else if (format[0] == '>' || format[0] == '!') format++;
#endif
    if (format[0] == '\0' || format[1] != '\0') return 0;
    return kind == FLOAT64 ? format[0] == 'd' : format[0] == 'q' || format[0] == 'l';
}

/* Take a C-contiguous, aligned buffer of native float64 or int64 items (any shape); -1 with an error set. */
static int take(PyObject *object, Buffer *buffer, int writable, char kind, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, &buffer->view, flags) != 0) {
        return -1;
    }
    buffer->held = 1;
    if (!native_format(buffer->view.format, buffer->view.itemsize, kind)) {
        PyErr_Format(PyExc_ValueError, "%s: expected native %s items, got format '%s'", name,
                     kind == FLOAT64 ? "float64" : "int64",
                     buffer->view.format ? buffer->view.format : "B");
        return -1;
    }
    if (buffer->view.len % 8 != 0) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes is not made of 8-byte items", name,
                     buffer->view.len);
        return -1;
    }
    if ((uintptr_t)buffer->view.buf % 8 != 0) {
        PyErr_Format(PyExc_ValueError, "%s: buffer is not 8-byte aligned", name);
        return -1;
    }
    return 0;
}

static int overlap(const Buffer *a, const Buffer *b) {
    if (!a->held || !b->held || a->view.len == 0 || b->view.len == 0) return 0;
    const char *a0 = a->view.buf, *b0 = b->view.buf;
    return a0 < b0 + b->view.len && b0 < a0 + a->view.len;
}

/*
 * Outputs are written while inputs are still read (and were checked before): an output sharing memory with
 * any other buffer could change checked sizes and offsets under the pass. -1 with an error set if one does.
 */
static int check_disjoint(const Buffer *outputs, int output_count, const Buffer *others, Py_ssize_t other_count,
                          const char *name) {
    for (int i = 0; i < output_count; i++) {
        for (Py_ssize_t j = 0; j < other_count; j++) {
            if (&outputs[i] != &others[j] && overlap(&outputs[i], &others[j])) {
                PyErr_Format(PyExc_ValueError, "%s: an output buffer shares memory with another argument", name);
                return -1;
            }
        }
    }
    return 0;
}

/*
 * Take a function's `count` buffer arguments, the outputs last (from `first_output` on, writable), and check
 * that no output shares memory with another argument. -1 with an error set; the caller releases `b`.
 */
static int take_arguments(PyObject *const *objects, Buffer *b, int count, int first_output,
                          const char *const *names, const char *kinds, const char *function) {
    for (int i = 0; i < count; i++) {
        if (take(objects[i], &b[i], i >= first_output, kinds[i], names[i]) != 0) return -1;
    }
    return check_disjoint(&b[first_output], count - first_output, b, count, function);
}

static void release(Buffer *buffers, int count) {
    for (int i = 0; i < count; i++) {
        if (buffers[i].held) {
            PyBuffer_Release(&buffers[i].view);
            buffers[i].held = 0;
        }
    }
}

#define ITEMS(buffer, type) ((Py_ssize_t)((buffer).view.len / (Py_ssize_t)sizeof(type)))
#define DATA(buffer, type) ((type *)(buffer).view.buf)

/* ---------------------------------------------------------------------------------------------------- */
/* fair_share_by_suggestion                                                                              */

typedef struct {
    double s;
    double f;
    double y[R];
} Point;

/*
 * Breakpoints t in (0, t_max) of the upper envelope of lines h0[i] + t * slope[i] (i < R + 1), in order.
 * From the top line at t = 0 (ties: the steepest), the next top line is the steeper line that crosses the
 * current one first (ties: the steepest). Returns how many were written to ts.
 */
static int envelope_breakpoints(const double *h0, const double *slope, double t_max, double *ts) {
    const int lines = R + 1;
    double top = h0[0];
    for (int i = 1; i < lines; i++) top = fmax(top, h0[i]);
    int current = -1;
    for (int i = 0; i < lines; i++) {
        if (h0[i] >= top && (current < 0 || slope[i] > slope[current])) current = i;
    }
    double t_now = 0.0;
    int found = 0;
    for (int iteration = 0; iteration < lines; iteration++) {
        double best = INFINITY;
        double cross[R + 1];
        for (int i = 0; i < lines; i++) {
            cross[i] = INFINITY;
            if (slope[i] > slope[current]) {
                double t = (h0[current] - h0[i]) / (slope[i] - slope[current]);
                if (t >= t_now) cross[i] = t;
            }
            if (cross[i] < best) best = cross[i];
        }
        int next = -1;
        for (int i = 0; i < lines; i++) {
            if (cross[i] <= best && (next < 0 || slope[i] > slope[next])) next = i;
        }
        if (best < t_max - 1e-12 && best > 1e-12) ts[found++] = best;
        if (!(best < t_max)) break;
        current = next;
        t_now = best;
    }
    return found;
}

static inline double interpolate(double a, double b, double t) {
    double d = b - a;
    return t < 0.5 ? a + d * t : b - d * (1.0 - t);
}

static inline int collinear(const Point *a, const Point *b, const Point *c) {
    if (!(a->s < b->s && b->s < c->s)) return 0;
    double w = (b->s - a->s) / (c->s - a->s);
    for (int r = 0; r < R; r++) {
        if (!(fabs(b->y[r] - (a->y[r] + (c->y[r] - a->y[r]) * w)) <= COMPRESS_EPSILON)) return 0;
    }
    return fabs(b->f - (a->f + (c->f - a->f) * w)) <= COMPRESS_EPSILON;
}

/* Trim the ends, keep only the limits of every jump, drop repeated points and (optionally) merge
 * collinear interior points, in place; returns the new count (functions.compress). */
static int64_t compress_points(Point *points, int64_t count, int merge_collinear, unsigned char *flags) {
    if (count == 0) return 0;
    double left_end = points[0].s, right_end = points[count - 1].s;
    int64_t kept = 0;
    for (int64_t k = 0; k < count; k++) {
        int same_next = k + 1 < count && points[k + 1].s == points[k].s;
        int same_prev = k > 0 && points[k - 1].s == points[k].s;
        int drop = (same_prev && same_next) || (points[k].s == left_end && same_next) ||
                   (points[k].s == right_end && same_prev);
        flags[k] = (unsigned char)drop;
    }
    for (int64_t k = 0; k < count; k++) {
        if (flags[k]) continue;
        if (kept > 0) {
            const Point *a = &points[kept - 1], *b = &points[k];
            int same = a->s == b->s && a->f == b->f;
            for (int r = 0; r < R && same; r++) same = a->y[r] == b->y[r];
            if (same) continue;
        }
        points[kept++] = points[k];
    }
    count = kept;
    if (!merge_collinear) return count;
    /* Rounds: mark the interior points collinear with their neighbours; within a run of marked points
     * drop every other one (two neighbours collinear with each other cannot both go), until none is left. */
    for (;;) {
        int any = 0;
        flags[0] = 0;
        flags[count > 0 ? count - 1 : 0] = 0;
        for (int64_t k = 1; k + 1 < count; k++) {
            flags[k] = (unsigned char)collinear(&points[k - 1], &points[k], &points[k + 1]);
            any |= flags[k];
        }
        if (!any) break;
        kept = 0;
        int64_t run_position = 0;
        for (int64_t k = 0; k < count; k++) {
            if (flags[k]) {
                int drop = run_position % 2 == 0;
                run_position++;
                if (drop) continue;
            } else {
                run_position = 0;
            }
            points[kept++] = points[k];
        }
        count = kept;
    }
    return count;
}

/*
 * FSBS = FSBFF ∘ MFFBS on [0, 1] for every function, MFFBS carried in f (functions.fair_share_by_suggestion):
 * limits and guarantees clamped to the function's range; the curve cut at its first point above the
 * limits (a tilted piece is cut where it crosses them); every kept piece contributes its start, the
 * breakpoints of sigma = max(0, max_r(value_r - guarantee_r)) inside it, its cut end, and for a vertical
 * piece a "wait" point (value still the left limit, suggestion already the right limit's); an uncut
 * function ends at its last point; then extended to s = 1 and compressed.
 */
static PyObject *fair_share_by_suggestion(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *objects[9];
    int merge_collinear;
    if (!PyArg_ParseTuple(args, "OOOOOpOOOO", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &merge_collinear, &objects[5], &objects[6], &objects[7], &objects[8])) {
        return NULL;
    }
    Buffer b[9];
    memset(b, 0, sizeof(b));
    static const char *names[9] = {"offsets", "x", "y", "guarantee", "limits",
                                   "out_offsets", "out_s", "out_y", "out_f"};
    static const char kinds[9] = {INT64, FLOAT64, FLOAT64, FLOAT64, FLOAT64, INT64, FLOAT64, FLOAT64, FLOAT64};
    if (take_arguments(objects, b, 9, 5, names, kinds, "fair_share_by_suggestion") != 0) {
        release(b, 9);
        return NULL;
    }
    const int64_t *offsets = DATA(b[0], int64_t);
    const double *x = DATA(b[1], double);
    const double *y = DATA(b[2], double);
    const double *guarantee_share = DATA(b[3], double);
    const double *limits_share = DATA(b[4], double);
    int64_t *out_offsets = DATA(b[5], int64_t);
    double *out_s = DATA(b[6], double);
    double *out_y = DATA(b[7], double);
    double *out_f = DATA(b[8], double);
    Py_ssize_t n = ITEMS(b[0], int64_t) - 1;
    Py_ssize_t points = ITEMS(b[1], double);
    Py_ssize_t capacity = ITEMS(b[6], double);
    if (n < 0 || ITEMS(b[2], double) != points * R || ITEMS(b[3], double) != n * R ||
        ITEMS(b[4], double) != n * R || ITEMS(b[5], int64_t) != n + 1 || ITEMS(b[7], double) != capacity * R ||
        ITEMS(b[8], double) != capacity || (n > 0 && offsets[n] != points)) {
        release(b, 9);
        PyErr_SetString(PyExc_ValueError, "fair_share_by_suggestion: inconsistent buffer sizes");
        return NULL;
    }
    int64_t longest = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (offsets[i] < 0 || offsets[i + 1] > points || offsets[i + 1] - offsets[i] < 1) {
            release(b, 9);
            PyErr_SetString(PyExc_ValueError, "fair_share_by_suggestion: every function needs a point");
            return NULL;
        }
        if (offsets[i + 1] - offsets[i] > longest) longest = offsets[i + 1] - offsets[i];
    }
    /* A kept piece yields at most its start, R + 1 breakpoints, a cut end and a wait point; then the end
     * and the tail. */
    size_t scratch_points = (size_t)longest * (R + 4) + 2;
    Point *path = malloc(scratch_points * sizeof(Point));
    unsigned char *flags = malloc(scratch_points);
    if (!path || !flags) {
        free(path), free(flags);
        release(b, 9);
        return PyErr_NoMemory();
    }
    int64_t written = 0;
    int overflow = 0;
    out_offsets[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t first = offsets[i], last = offsets[i + 1] - 1;
        double limit[R], guarantee[R];
        for (int r = 0; r < R; r++) {
            limit[r] = fmin(fmax(limits_share[i * R + r], y[first * R + r]), y[last * R + r]);
            guarantee[r] = fmin(fmax(guarantee_share[i * R + r], y[first * R + r]), limit[r]);
        }
        /* The first point above the limits ends the kept part. */
        int64_t end_kept = last + 1;
        for (int64_t j = first; j <= last && end_kept > last; j++) {
            for (int r = 0; r < R; r++) {
                if (y[j * R + r] > limit[r] + LIMIT_TOLERANCE) {
                    end_kept = j;
                    break;
                }
            }
        }
        /* A jump whose right limit lands on a limit that the next point crosses is not taken: MFFBS stays
         * at the jump (functions._drop_jump_onto_limit). */
        if (end_kept <= last && end_kept - 2 >= first && x[end_kept - 1] == x[end_kept - 2]) {
            for (int r = 0; r < R; r++) {
                if (y[end_kept * R + r] > limit[r] + LIMIT_TOLERANCE &&
                    y[(end_kept - 1) * R + r] >= limit[r] - LIMIT_TOLERANCE) {
                    end_kept -= 1;
                    break;
                }
            }
        }
        int cut = end_kept <= last;
        int64_t count = 0;
        for (int64_t j = first; j < last && j < end_kept; j++) {
            const double *ya = &y[j * R], *yb = &y[(j + 1) * R];
            double xa = x[j], xb = x[j + 1];
            int segment_end_kept = j + 1 < end_kept;
            int vertical = xb == xa;
            double t_max = 1.0;
            if (!segment_end_kept) {
                double t_min = INFINITY;
                for (int r = 0; r < R; r++) {
                    if (yb[r] > limit[r] + LIMIT_TOLERANCE) {
                        t_min = fmin(t_min, (limit[r] - ya[r]) / (yb[r] - ya[r]));
                    }
                }
                t_max = fmin(fmax(t_min, 0.0), 1.0);
                if (vertical) t_max = 0.0;
            }
            /* The piece's start. */
            Point *start = &path[count++];
            start->f = xa;
            memcpy(start->y, ya, sizeof(start->y));
            double sigma = 0.0;
            for (int r = 0; r < R; r++) sigma = fmax(sigma, ya[r] - guarantee[r]);
            start->s = sigma;
            if (!vertical && t_max > 0) {
                double h0[R + 1], slope[R + 1], ts[R + 1];
                int top_start = 0, top_end = 0;
                for (int r = 0; r < R; r++) {
                    h0[r] = ya[r] - guarantee[r];
                    slope[r] = yb[r] - ya[r];
                }
                h0[R] = 0.0;
                slope[R] = 0.0;
                for (int i2 = 1; i2 <= R; i2++) {
                    if (h0[i2] > h0[top_start]) top_start = i2;
                }
                double best_end = h0[0] + slope[0] * t_max;
                for (int i2 = 1; i2 <= R; i2++) {
                    double h1 = h0[i2] + slope[i2] * t_max;
                    if (h1 > best_end) {
                        best_end = h1;
                        top_end = i2;
                    }
                }
                int breakpoints = top_start != top_end ? envelope_breakpoints(h0, slope, t_max, ts) : 0;
                for (int k = 0; k <= breakpoints; k++) {
                    double t;
                    if (k < breakpoints) {
                        t = ts[k];
                    } else if (!segment_end_kept) {
                        t = t_max; /* the cut end */
                    } else {
                        break;
                    }
                    Point *point = &path[count++];
                    double top = 0.0;
                    for (int r = 0; r < R; r++) {
                        point->y[r] = interpolate(ya[r], yb[r], t);
                        top = fmax(top, point->y[r] - guarantee[r]);
                    }
                    point->f = xa + (xb - xa) * t;
                    point->s = top;
                }
            }
            if (vertical && segment_end_kept) {
                /* Wait at the left limit until the suggestion covers the right limit. */
                Point *point = &path[count++];
                double top = 0.0;
                memcpy(point->y, ya, sizeof(point->y));
                for (int r = 0; r < R; r++) top = fmax(top, yb[r] - guarantee[r]);
                point->f = xa;
                point->s = top;
            }
        }
        if (!cut) {
            Point *point = &path[count++];
            double top = 0.0;
            memcpy(point->y, &y[last * R], sizeof(point->y));
            for (int r = 0; r < R; r++) top = fmax(top, point->y[r] - guarantee[r]);
            point->f = x[last];
            point->s = top;
        }
        for (int64_t k = 0; k < count; k++) {
            /* Rounding noise of sums away from 0 or 1 (functions.snap_suggestions). */
            if (path[k].s < ZERO_SUGGESTION) path[k].s = 0.0;
            if (path[k].s < 1.0 && path[k].s > 1.0 - FULL_SUGGESTION_TOLERANCE) path[k].s = 1.0;
        }
        if (count > 0 && path[count - 1].s < 1.0) {
            path[count] = path[count - 1];
            path[count].s = 1.0;
            count++;
        }
        count = compress_points(path, count, merge_collinear, flags);
        if (written + count > capacity) {
            overflow = 1;
            break;
        }
        for (int64_t k = 0; k < count; k++) {
            out_s[written] = path[k].s;
            out_f[written] = path[k].f;
            memcpy(&out_y[written * R], path[k].y, sizeof(path[k].y));
            written++;
        }
        out_offsets[i + 1] = written;
    }
    free(path), free(flags);
    release(b, 9);
    if (overflow) {
        PyErr_SetString(PyExc_RuntimeError, "fair_share_by_suggestion: output capacity exceeded");
        return NULL;
    }
    return PyLong_FromLongLong(written);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Sources: functions kept in several batches                                                            */

/* One batch of functions: offsets (functions + 1), x, y (points × R) and, for FSBS batches, f. */
typedef struct {
    const int64_t *offsets;
    const double *x, *y, *f;
    Py_ssize_t functions, points;
} Source;

/* Take the buffers of a tuple of (offsets, x, y[, f]) tuples; `with_f`: f is required. */
static int take_sources(PyObject *tuple, int with_f, Source **sources_out, Buffer **buffers_out,
                        Py_ssize_t *count_out) {
    if (!PyTuple_Check(tuple)) {
        PyErr_SetString(PyExc_TypeError, "sources must be a tuple of (offsets, x, y[, f]) tuples");
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(tuple);
    int width = with_f ? 4 : 3;
    Source *sources = calloc((size_t)count + 1, sizeof(Source));
    Buffer *buffers = calloc((size_t)(count * width) + 1, sizeof(Buffer));
    *sources_out = sources;
    *buffers_out = buffers;
    *count_out = 0;
    if (!sources || !buffers) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, k);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < width) {
            PyErr_SetString(PyExc_TypeError, "every source must be an (offsets, x, y[, f]) tuple");
            return -1;
        }
        *count_out = k + 1;
        for (int i = 0; i < width; i++) {
            if (take(PyTuple_GET_ITEM(item, i), &buffers[k * width + i], 0, i == 0 ? INT64 : FLOAT64,
                     "source") != 0) {
                return -1;
            }
        }
        Source *s = &sources[k];
        s->offsets = DATA(buffers[k * width], int64_t);
        s->x = DATA(buffers[k * width + 1], double);
        s->y = DATA(buffers[k * width + 2], double);
        s->f = with_f ? DATA(buffers[k * width + 3], double) : NULL;
        s->functions = ITEMS(buffers[k * width], int64_t) - 1;
        s->points = ITEMS(buffers[k * width + 1], double);
        if (s->functions < 0 || ITEMS(buffers[k * width + 2], double) != s->points * R ||
            (with_f && ITEMS(buffers[k * width + 3], double) != s->points) ||
            (s->functions > 0 && (s->offsets[0] < 0 || s->offsets[s->functions] > s->points))) {
            PyErr_SetString(PyExc_ValueError, "source: inconsistent buffer sizes");
            return -1;
        }
        for (Py_ssize_t i = 0; i < s->functions; i++) {
            if (s->offsets[i] > s->offsets[i + 1]) {
                PyErr_SetString(PyExc_ValueError, "source: offsets must not decrease");
                return -1;
            }
        }
    }
    return 0;
}

static void release_sources(Source *sources, Buffer *buffers, Py_ssize_t count, int with_f) {
    if (buffers) release(buffers, (int)(count * (with_f ? 4 : 3)));
    free(sources);
    free(buffers);
}

/* ---------------------------------------------------------------------------------------------------- */
/* sum_functions                                                                                         */

/* A child being merged: its current event (the slope change and the jump at one of its points). */
typedef struct {
    const double *x, *y;
    int64_t j, hi; /* current point, end of the child's points */
    double scale, shift;
    double position, next_position; /* of points j and j + 1 on the parent's axis */
    double previous_slope[R];
    double change[R], jump[R]; /* the event at point j */
    int order;                 /* ties of position are taken in child order */
} Cursor;

/* Move to the next point that changes the slope or starts a jump; returns 0 at the end of the child. */
static int advance(Cursor *c) {
    while (c->j < c->hi) {
        int64_t j = c->j;
        double position = c->next_position;
        double slope[R] = {0, 0, 0, 0, 0};
        int active = 0;
        if (j + 1 < c->hi) {
            double next = c->x[j + 1] * c->scale + c->shift;
            double dx = next - position;
            /* Near-vertical pieces are jumps: their huge slopes would only add rounding noise. */
            int vertical = dx <= 1e-13 * fmax(1.0, fabs(next));
            for (int r = 0; r < R; r++) {
                double dy = c->y[(j + 1) * R + r] - c->y[j * R + r];
                c->jump[r] = vertical ? dy : 0.0;
                if (!vertical) slope[r] = dy / dx;
            }
            c->next_position = next;
        } else {
            for (int r = 0; r < R; r++) c->jump[r] = 0.0;
        }
        for (int r = 0; r < R; r++) {
            c->change[r] = slope[r] - c->previous_slope[r];
            active |= c->change[r] != 0.0 || c->jump[r] != 0.0;
            c->previous_slope[r] = slope[r];
        }
        c->position = position;
        c->j = j + 1;
        if (active) return 1;
    }
    return 0;
}

static inline int cursor_before(const Cursor *a, const Cursor *b) {
    return a->position < b->position || (a->position == b->position && a->order < b->order);
}

static void sift_down(Cursor **heap, int64_t size, int64_t i) {
    for (;;) {
        int64_t smallest = i, l = 2 * i + 1, r = l + 1;
        if (l < size && cursor_before(heap[l], heap[smallest])) smallest = l;
        if (r < size && cursor_before(heap[r], heap[smallest])) smallest = r;
        if (smallest == i) return;
        Cursor *swap = heap[i];
        heap[i] = heap[smallest];
        heap[smallest] = swap;
        i = smallest;
    }
}

/*
 * Write the points of one group of a sum at `position` with value `left` before it and `jump` there: the
 * left limit, and also the right limit at a jump, except that the first group (at 0) keeps only its right
 * limit and the last one (the right bound) only its left limit. Returns -1 when out of capacity.
 */
static int emit_group(double position, const double *left, const double *jump, int first, int last,
                      double *out_x, double *out_y, int64_t *written, Py_ssize_t capacity) {
    int has_jump = 0;
    for (int r = 0; r < R; r++) has_jump |= jump[r] != 0.0;
    int both = has_jump && !first && !last;
    if (*written + 1 + both > capacity) return -1;
    out_x[*written] = position;
    for (int r = 0; r < R; r++) out_y[*written * R + r] = has_jump && first ? left[r] + jump[r] : left[r];
    (*written)++;
    if (both) {
        out_x[*written] = position;
        for (int r = 0; r < R; r++) out_y[*written * R + r] = left[r] + jump[r];
        (*written)++;
    }
    return 0;
}

/*
 * For every parent slot p: the sum over its children c of FSBS_c((f - shift_c) / scale_c) on [0, right_p],
 * each child placed on [shift_c, shift_c + scale_c] and constant outside (scale_c = inf: the child stays at
 * its left value). Same rules as functions.sum_functions_numpy: one event per child point (slope change and
 * the jump that starts there), near-vertical pieces are jumps, events at equal positions are summed, a jump
 * is two points except at 0 (right limit only) and at the right bound (left limit only). The children's
 * events are merged with a heap (each child's points are already in order), so every child is read once,
 * front to back.
 */
static PyObject *sum_functions(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *source_tuple, *objects[9];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO", &source_tuple, &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4], &objects[5], &objects[6], &objects[7], &objects[8])) {
        return NULL;
    }
    Source *sources = NULL;
    Buffer *source_buffers = NULL;
    Py_ssize_t source_count = 0;
    Buffer b[9];
    memset(b, 0, sizeof(b));
    static const char *names[9] = {"child_source", "child_row", "parent_slot", "scale", "shift",
                                   "right_bound",  "out_offsets", "out_x",     "out_y"};
    static const char kinds[9] = {INT64, INT64, INT64, FLOAT64, FLOAT64, FLOAT64, INT64, FLOAT64, FLOAT64};
    if (take_sources(source_tuple, 0, &sources, &source_buffers, &source_count) != 0 ||
        take_arguments(objects, b, 9, 6, names, kinds, "sum_functions") != 0 ||
        check_disjoint(&b[6], 3, source_buffers, source_count * 3, "sum_functions") != 0) {
        goto fail;
    }
    const int64_t *child_source = DATA(b[0], int64_t);
    const int64_t *child_row = DATA(b[1], int64_t);
    const int64_t *parent_slot = DATA(b[2], int64_t);
    const double *scale = DATA(b[3], double);
    const double *shift = DATA(b[4], double);
    const double *right_bound = DATA(b[5], double);
    int64_t *out_offsets = DATA(b[6], int64_t);
    double *out_x = DATA(b[7], double);
    double *out_y = DATA(b[8], double);
    Py_ssize_t n = ITEMS(b[0], int64_t);
    Py_ssize_t m = ITEMS(b[5], double);
    Py_ssize_t capacity = ITEMS(b[7], double);
    if (ITEMS(b[1], int64_t) != n || ITEMS(b[2], int64_t) != n || ITEMS(b[3], double) != n ||
        ITEMS(b[4], double) != n || ITEMS(b[6], int64_t) != m + 1 || ITEMS(b[8], double) != capacity * R) {
        PyErr_SetString(PyExc_ValueError, "sum_functions: inconsistent buffer sizes");
        goto fail;
    }
    for (Py_ssize_t c = 0; c < n; c++) {
        if (parent_slot[c] < 0 || parent_slot[c] >= m || child_source[c] < 0 || child_source[c] >= source_count ||
            child_row[c] < 0 || child_row[c] >= sources[child_source[c]].functions) {
            PyErr_SetString(PyExc_ValueError, "sum_functions: bad child source, row or parent slot");
            goto fail;
        }
    }

    /* Children grouped by parent (counting sort, children keep their order). */
    int64_t *child_start = calloc((size_t)m + 2, sizeof(int64_t));
    int64_t *children = malloc(((size_t)n + 1) * sizeof(int64_t));
    int64_t *fill = malloc(((size_t)m + 1) * sizeof(int64_t));
    Cursor *cursors = malloc(((size_t)n + 1) * sizeof(Cursor));
    Cursor **heap = malloc(((size_t)n + 1) * sizeof(Cursor *));
    if (!child_start || !children || !fill || !cursors || !heap) {
        free(child_start), free(children), free(fill), free(cursors), free(heap);
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t c = 0; c < n; c++) child_start[parent_slot[c] + 1]++;
    for (Py_ssize_t p = 0; p < m; p++) child_start[p + 1] += child_start[p];
    memcpy(fill, child_start, ((size_t)m + 1) * sizeof(int64_t));
    for (Py_ssize_t c = 0; c < n; c++) children[fill[parent_slot[c]]++] = c;
    free(fill);

    int64_t written = 0;
    int overflow = 0;
    out_offsets[0] = 0;
    for (Py_ssize_t p = 0; p < m && !overflow; p++) {
        double value[R] = {0, 0, 0, 0, 0};
        int64_t size = 0;
        for (int64_t k = child_start[p]; k < child_start[p + 1]; k++) {
            int64_t c = children[k];
            const Source *s = &sources[child_source[c]];
            int64_t lo = s->offsets[child_row[c]], hi = s->offsets[child_row[c] + 1];
            if (lo == hi) continue; /* an empty function adds nothing */
            for (int r = 0; r < R; r++) value[r] += s->y[lo * R + r];
            if (!isfinite(scale[c])) continue;
            Cursor *cursor = &cursors[size];
            cursor->x = s->x;
            cursor->y = s->y;
            cursor->j = lo;
            cursor->hi = hi;
            cursor->scale = scale[c];
            cursor->shift = shift[c];
            cursor->next_position = s->x[lo] * scale[c] + shift[c];
            memset(cursor->previous_slope, 0, sizeof(cursor->previous_slope));
            cursor->order = (int)(k - child_start[p]);
            if (advance(cursor)) heap[size++] = cursor;
        }
        for (int64_t i = size / 2 - 1; i >= 0; i--) sift_down(heap, size, i);

        /* Sweep groups of equal positions: the group at 0 and the one at the right bound always exist. */
        double slope_now[R] = {0, 0, 0, 0, 0};
        double group_position = 0.0, group_slope[R] = {0, 0, 0, 0, 0}, group_jump[R] = {0, 0, 0, 0, 0};
        int first_group = 1, bound_pending = 1;
        for (;;) {
            double next_position;
            int from_heap;
            if (size > 0 && (!bound_pending || heap[0]->position <= right_bound[p])) {
                next_position = heap[0]->position;
                from_heap = 1;
            } else if (bound_pending) {
                next_position = right_bound[p];
                from_heap = 0;
            } else {
                break;
            }
            if (next_position != group_position) {
                /* Close the current group: its points, then the value at the next position. */
                for (int r = 0; r < R; r++) slope_now[r] += group_slope[r];
                if (emit_group(group_position, value, group_jump, first_group, 0, out_x, out_y, &written,
                               capacity) != 0) {
                    overflow = 1;
                    break;
                }
                double dx = next_position - group_position;
                for (int r = 0; r < R; r++) {
                    value[r] += group_jump[r] + slope_now[r] * dx;
                    group_slope[r] = 0.0;
                    group_jump[r] = 0.0;
                }
                group_position = next_position;
                first_group = 0;
            }
            if (from_heap) {
                Cursor *top = heap[0];
                for (int r = 0; r < R; r++) {
                    group_slope[r] += top->change[r];
                    group_jump[r] += top->jump[r];
                }
                if (advance(top)) {
                    sift_down(heap, size, 0);
                } else {
                    heap[0] = heap[--size];
                    sift_down(heap, size, 0);
                }
            } else {
                bound_pending = 0;
            }
        }
        if (overflow) break;
        if (emit_group(group_position, value, group_jump, first_group, 1, out_x, out_y, &written, capacity) != 0) {
            overflow = 1;
            break;
        }
        out_offsets[p + 1] = written;
    }
    free(child_start), free(children), free(cursors), free(heap);
    if (overflow) {
        PyErr_SetString(PyExc_RuntimeError, "sum_functions: output capacity exceeded");
        goto fail;
    }
    release(b, 9);
    release_sources(sources, source_buffers, source_count, 0);
    return PyLong_FromLongLong(written);
fail:
    release(b, 9);
    release_sources(sources, source_buffers, source_count, 0);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------- */
/* evaluate                                                                                              */

/*
 * Values and fit factors of FSBS functions (row_of[k] of sources[source_of[k]]) at suggestions s[k],
 * left-continuous (functions.evaluate): the first point with x >= s, interpolated from the point before.
 */
static PyObject *evaluate(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *source_tuple, *objects[5];
    if (!PyArg_ParseTuple(args, "OOOOOO", &source_tuple, &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4])) {
        return NULL;
    }
    Source *sources = NULL;
    Buffer *source_buffers = NULL;
    Py_ssize_t source_count = 0;
    Buffer b[5];
    memset(b, 0, sizeof(b));
    static const char *names[5] = {"source_of", "row_of", "s", "out_values", "out_fits"};
    static const char kinds[5] = {INT64, INT64, FLOAT64, FLOAT64, FLOAT64};
    if (take_sources(source_tuple, 1, &sources, &source_buffers, &source_count) != 0 ||
        take_arguments(objects, b, 5, 3, names, kinds, "evaluate") != 0 ||
        check_disjoint(&b[3], 2, source_buffers, source_count * 4, "evaluate") != 0) {
        goto fail;
    }
    const int64_t *source_of = DATA(b[0], int64_t);
    const int64_t *row_of = DATA(b[1], int64_t);
    const double *suggestion = DATA(b[2], double);
    double *out_values = DATA(b[3], double);
    double *out_fits = DATA(b[4], double);
    Py_ssize_t k_count = ITEMS(b[0], int64_t);
    if (ITEMS(b[1], int64_t) != k_count || ITEMS(b[2], double) != k_count ||
        ITEMS(b[3], double) != k_count * R || ITEMS(b[4], double) != k_count) {
        PyErr_SetString(PyExc_ValueError, "evaluate: inconsistent buffer sizes");
        goto fail;
    }
    for (Py_ssize_t k = 0; k < k_count; k++) {
        if (source_of[k] < 0 || source_of[k] >= source_count || row_of[k] < 0 ||
            row_of[k] >= sources[source_of[k]].functions ||
            sources[source_of[k]].offsets[row_of[k]] == sources[source_of[k]].offsets[row_of[k] + 1]) {
            PyErr_SetString(PyExc_ValueError, "evaluate: bad source or row (or an empty function)");
            goto fail;
        }
    }
    for (Py_ssize_t k = 0; k < k_count; k++) {
        const Source *src = &sources[source_of[k]];
        int64_t start = src->offsets[row_of[k]], lo = start, hi = src->offsets[row_of[k] + 1] - 1;
        double s = suggestion[k];
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (src->x[mid] >= s) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        int64_t at = lo, before = at - 1 > start ? at - 1 : start;
        double xk = src->x[at], xp = src->x[before];
        int exact = xk <= s || at == start;
        double t = 1.0;
        if (!exact) {
            double span = xk - xp;
            t = span > 0 ? (s - xp) / span : 1.0;
            t = fmin(fmax(t, 0.0), 1.0);
        }
        for (int r = 0; r < R; r++) {
            double yk = src->y[at * R + r], yp = src->y[before * R + r];
            out_values[k * R + r] = exact ? yk : interpolate(yp, yk, t);
        }
        out_fits[k] = exact ? src->f[at] : interpolate(src->f[before], src->f[at], t);
    }
    release(b, 5);
    release_sources(sources, source_buffers, source_count, 1);
    Py_RETURN_NONE;
fail:
    release(b, 5);
    release_sources(sources, source_buffers, source_count, 1);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------- */
/* read_vectors                                                                                          */

/*
 * Copy rows that are C-contiguous float64 vectors of R (numpy arrays, as the input model holds them) into
 * out (len(rows) × R). Returns -1 when every row was copied, else the index of the first row that is not
 * such a vector: the caller then converts and validates the rows the slow way. Reading the vectors through
 * the buffer protocol touches each row once, where numpy's generic conversion of a list of arrays inspects
 * every item several times.
 */
static PyObject *read_vectors(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *rows_object, *out_object;
    if (!PyArg_ParseTuple(args, "OO", &rows_object, &out_object)) return NULL;
    /* A tuple of our own: getting a row's buffer may run Python code, which must not resize the rows. */
    PyObject *rows = PySequence_Tuple(rows_object);
    if (!rows) return NULL;
    Buffer out;
    memset(&out, 0, sizeof(out));
    if (take(out_object, &out, 1, FLOAT64, "out") != 0) {
        Py_DECREF(rows);
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(rows);
    if (ITEMS(out, double) != count * R) {
        release(&out, 1);
        Py_DECREF(rows);
        PyErr_SetString(PyExc_ValueError, "read_vectors: out must hold len(rows) x 5 numbers");
        return NULL;
    }
    double *target = DATA(out, double);
    PyObject **items = PySequence_Fast_ITEMS(rows);
    Py_ssize_t first_bad = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_buffer view;
        if (!PyObject_CheckBuffer(items[i]) ||
            PyObject_GetBuffer(items[i], &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
            PyErr_Clear();
            first_bad = i;
            break;
        }
        int ok = view.ndim == 1 && view.shape != NULL && view.shape[0] == R && view.itemsize == 8 &&
                 view.format != NULL && strcmp(view.format, "d") == 0;
        if (ok) memcpy(&target[i * R], view.buf, R * sizeof(double));
        PyBuffer_Release(&view);
        if (!ok) {
            first_bad = i;
            break;
        }
    }
    release(&out, 1);
    Py_DECREF(rows);
    return PyLong_FromSsize_t(first_bad);
}

static PyMethodDef methods[] = {
    {"sum_functions", sum_functions, METH_VARARGS,
     "sum_functions(sources, child_source, child_row, parent_slot, scale, shift, right_bound, out_offsets, "
     "out_x, out_y) -> points written; sources: a tuple of (offsets, x, y) tuples"},
    {"evaluate", evaluate, METH_VARARGS,
     "evaluate(sources, source_of, row_of, s, out_values, out_fits) -> None; sources: a tuple of "
     "(offsets, x, y, f) tuples"},
    {"fair_share_by_suggestion", fair_share_by_suggestion, METH_VARARGS,
     "fair_share_by_suggestion(offsets, x, y, guarantee, limits, merge_collinear, out_offsets, out_s, out_y, "
     "out_f) -> points written"},
    {"read_vectors", read_vectors, METH_VARARGS,
     "read_vectors(rows, out) -> -1 when every row was a float64 vector of 5 (copied into out), else the "
     "index of the first row that was not"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pooltree.fairshare._kernels",
    "Compiled per-function passes of the fair-share function build (see functions.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
