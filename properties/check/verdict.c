/* verdict.c: the result of checking one case: outcome, per-tensor statistics,
 * human-readable reasons, text and JSON forms. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "properties/check/check.h"

const char *fc_outcome_name(fc_outcome o) {
    switch (o) {
    case FC_PASS: return "pass";
    case FC_FAIL: return "fail";
    case FC_SKIP: return "skip";
    case FC_OVERFLOW: return "overflow-sensitive";
    }
    return "?";
}

void fc_verdict_init(fc_verdict *v) { memset(v, 0, sizeof *v); }

const char *fc_phase_name(fc_phase p) {
    switch (p) {
    case FC_PHASE_NONE: return "";
    case FC_PHASE_FORWARD: return "forward";
    case FC_PHASE_BACKWARD: return "backward";
    }
    return "?";
}

const char *fc_reason_kind_name(fc_reason_kind k) {
    switch (k) {
    case FC_REASON_FAILURE: return "failure";
    case FC_REASON_HARNESS: return "harness";
    case FC_REASON_UNSUPPORTED: return "unsupported";
    case FC_REASON_UNCHECKABLE: return "uncheckable";
    case FC_REASON_OVERFLOW: return "overflow";
    case FC_REASON_NOT_JUDGED: return "not_judged";
    case FC_REASON_DEVICE: return "device";
    case FC_REASON_NOTE: return "note";
    }
    return "?";
}

static int is_note(const fc_reason *r) { return r->kind == FC_REASON_NOTE; }

/* The slot for a new reason: notes go last; any other reason goes before the first note (the
 * notes move up; with the list full the last note gives way). NULL: the list is full. */
static fc_reason *reason_slot(fc_verdict *v, int note) {
    int first_note = v->n_reasons;
    while (first_note > 0 && is_note(&v->reason[first_note - 1])) first_note--;
    if (v->n_reasons == FC_VERDICT_MAX_REASONS) {
        if (note || first_note == v->n_reasons) return NULL;
        v->n_reasons--; /* the last note is dropped (counted by the caller) */
        v->n_dropped++;
    }
    if (note) return &v->reason[v->n_reasons++];
    memmove(&v->reason[first_note + 1], &v->reason[first_note],
            (size_t)(v->n_reasons - first_note) * sizeof v->reason[0]);
    v->n_reasons++;
    return &v->reason[first_note];
}

static void add_reason(fc_verdict *v, fc_phase phase, fc_reason_kind kind, const char *check, const char *fmt,
                       va_list ap) {
    if (kind == FC_REASON_NOTE) { /* no outcome change */ }
    else if (fc_reason_fails(kind)) v->outcome = FC_FAIL;
    else if (kind == FC_REASON_OVERFLOW) { if (v->outcome != FC_FAIL) v->outcome = FC_OVERFLOW; }
    else if (v->outcome == FC_PASS) v->outcome = FC_SKIP;
    fc_reason *r = reason_slot(v, kind == FC_REASON_NOTE);
    if (!r) {
        v->n_dropped++;
        return;
    }
    if (kind == FC_REASON_NOTE) check = "note";
    else if (kind == FC_REASON_OVERFLOW) check = "overflow";
    else if (!fc_reason_fails(kind)) check = "skip";
    else if (!check) check = kind == FC_REASON_HARNESS ? "harness" : "fail";
    snprintf(r->check, sizeof r->check, "%s", check);
    vsnprintf(r->text, sizeof r->text, fmt, ap);
    r->phase = phase;
    r->kind = kind;
}

void fc_verdict_add(fc_verdict *v, fc_phase phase, fc_reason_kind kind, const char *check, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_reason(v, phase, kind, check, fmt, ap);
    va_end(ap);
}

void fc_verdict_decline(fc_verdict *v, fc_phase phase, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_reason(v, phase, FC_REASON_UNSUPPORTED, NULL, fmt, ap);
    va_end(ap);
}

void fc_verdict_note(fc_verdict *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_reason(v, FC_PHASE_NONE, FC_REASON_NOTE, NULL, fmt, ap);
    va_end(ap);
}

void fc_verdict_fail(fc_verdict *v, const char *check, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_reason(v, FC_PHASE_NONE, strcmp(check, "harness") ? FC_REASON_FAILURE : FC_REASON_HARNESS, check, fmt, ap);
    va_end(ap);
}

void fc_verdict_skip(fc_verdict *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_reason(v, FC_PHASE_NONE, FC_REASON_NOT_JUDGED, NULL, fmt, ap);
    va_end(ap);
}

void fc_verdict_overflow(fc_verdict *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_reason(v, FC_PHASE_NONE, FC_REASON_OVERFLOW, NULL, fmt, ap);
    va_end(ap);
}

void fc_verdict_merge(fc_verdict *dst, const fc_verdict *src) {
    for (int i = 0; i < src->n_reasons; i++) {
        fc_reason *r = reason_slot(dst, is_note(&src->reason[i]));
        if (!r) {
            dst->n_dropped++;
            continue;
        }
        *r = src->reason[i];
    }
    dst->n_dropped += src->n_dropped;
    for (int t = 0; t < FC_T_COUNT; t++)
        if (src->t[t].checked) dst->t[t] = src->t[t];
    if (src->outcome == FC_FAIL) dst->outcome = FC_FAIL;
    else if (src->outcome == FC_OVERFLOW && dst->outcome != FC_FAIL) dst->outcome = FC_OVERFLOW;
    else if (src->outcome == FC_SKIP && dst->outcome == FC_PASS) dst->outcome = FC_SKIP;
}

double fc_bias_mean(double sum, int64_t n) {
    return n > 0 ? sum / (double)n : NAN;   /* one division, rounded to nearest */
}

const char *fc_verdict_first_check(const fc_verdict *v) {
    for (int i = 0; i < v->n_reasons; i++)
        if (strcmp(v->reason[i].check, "skip") != 0 && !is_note(&v->reason[i]) &&
            (strcmp(v->reason[i].check, "overflow") != 0 || v->outcome == FC_OVERFLOW))
            return v->reason[i].check;
    return "";
}

int fc_verdict_has(const fc_verdict *v, const char *check) {
    size_t n = strlen(check);
    int prefix = n > 0 && check[n - 1] == '*';
    for (int i = 0; i < v->n_reasons; i++) {
        if (prefix ? strncmp(v->reason[i].check, check, n - 1) == 0 : strcmp(v->reason[i].check, check) == 0)
            return 1;
    }
    return 0;
}

void fc_verdict_print(const fc_verdict *v, FILE *f) {
    fprintf(f, "verdict: %s\n", fc_outcome_name(v->outcome));
    for (int t = 0; t < FC_T_COUNT; t++) {
        const fc_tensor_stats *s = &v->t[t];
        if (!s->checked) continue;
        fprintf(f, "  %-3s n=%lld viol=%lld nonfinite=%lld overflow-sensitive=%lld unwritten=%lld max_err=%.3g "
                   "max_ratio=%.3g |ref|=%.3g |got|=%.3g |bound|=%.3g%s\n",
                fc_tensor_name(t), (long long)s->elements, (long long)s->violations,
                (long long)s->nonfinite_mismatch, (long long)s->overflow_sensitive, (long long)s->unwritten,
                s->max_abs_err, s->max_ratio,
                s->ref_norm2, s->got_norm2, s->bound_norm2, s->weak ? " WEAK" : "");
    }
    for (int i = 0; i < v->n_reasons; i++) fprintf(f, "  [%s] %s\n", v->reason[i].check, v->reason[i].text);
    if (v->n_dropped) fprintf(f, "  (%d more reasons dropped)\n", v->n_dropped);
}

/* ---------------------------------------------------------------------------
 * JSON
 * ------------------------------------------------------------------------- */
typedef struct {
    char *buf;
    size_t cap, len;
} jbuf;

static void jp(jbuf *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = j->len < j->cap ? j->buf + j->len : NULL;
    size_t room = j->len < j->cap ? j->cap - j->len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) j->len += (size_t)n;
}

static void jstr(jbuf *j, const char *s) {
    jp(j, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') jp(j, "\\%c", ch);
        else if (ch < 0x20) jp(j, "\\u%04x", ch);
        else jp(j, "%c", ch);
    }
    jp(j, "\"");
}

static void jnum(jbuf *j, double x) {
    if (isnan(x)) jp(j, "\"nan\"");
    else if (isinf(x)) jp(j, x > 0 ? "\"inf\"" : "\"-inf\"");
    else jp(j, "%.17g", x);
}

size_t fc_verdict_json(const fc_verdict *v, char *buf, size_t buflen) {
    jbuf j = {buf, buflen, 0};
    if (buflen) buf[0] = 0;
    jp(&j, "{\"outcome\":");
    jstr(&j, fc_outcome_name(v->outcome));
    jp(&j, ",\"tensors\":{");
    int first = 1;
    for (int t = 0; t < FC_T_COUNT; t++) {
        const fc_tensor_stats *s = &v->t[t];
        if (!s->checked) continue;
        jp(&j, "%s\"%s\":{\"elements\":%lld,\"violations\":%lld,\"nonfinite_mismatch\":%lld,"
               "\"overflow_sensitive\":%lld,\"unwritten\":%lld,",
           first ? "" : ",", fc_tensor_name(t), (long long)s->elements, (long long)s->violations,
           (long long)s->nonfinite_mismatch, (long long)s->overflow_sensitive, (long long)s->unwritten);
        first = 0;
        jp(&j, "\"max_abs_err\":"); jnum(&j, s->max_abs_err);
        jp(&j, ",\"max_ratio\":"); jnum(&j, s->max_ratio);
        jp(&j, ",\"ref_norm2\":"); jnum(&j, s->ref_norm2);
        jp(&j, ",\"got_norm2\":"); jnum(&j, s->got_norm2);
        jp(&j, ",\"bound_norm2\":"); jnum(&j, s->bound_norm2);
        jp(&j, ",\"weak\":%s,\"worst\":[%lld,%lld,%lld,%lld],\"worst_got\":", s->weak ? "true" : "false",
           (long long)s->worst[0], (long long)s->worst[1], (long long)s->worst[2], (long long)s->worst[3]);
        jnum(&j, s->worst_got);
        jp(&j, ",\"worst_ref\":"); jnum(&j, s->worst_ref);
        jp(&j, ",\"worst_bound\":"); jnum(&j, s->worst_bound);
        jp(&j, ",\"mean_bias\":"); jnum(&j, fc_bias_mean(s->bias_sum, s->bias_n));
        jp(&j, ",\"mean_bias_toward_zero\":"); jnum(&j, fc_bias_mean(s->bias_zero_sum, s->bias_n));
        jp(&j, "}");
    }
    jp(&j, "},\"reasons\":[");
    for (int i = 0; i < v->n_reasons; i++) {
        jp(&j, "%s{\"check\":", i ? "," : "");
        jstr(&j, v->reason[i].check);
        jp(&j, ",\"text\":");
        jstr(&j, v->reason[i].text);
        jp(&j, ",\"phase\":");
        jstr(&j, fc_phase_name(v->reason[i].phase));
        jp(&j, ",\"kind\":");
        jstr(&j, fc_reason_kind_name(v->reason[i].kind));
        jp(&j, "}");
    }
    jp(&j, "],\"dropped\":%d}", v->n_dropped);
    return j.len;
}
