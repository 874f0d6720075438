/* rp_svg.c: histogram and heat map as standalone SVG (rp_svg.h).
 * Coordinates are printed with %.1f; colours are exact sRGB triples. Nothing
 * here judges anything: values are displayed as given. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/rp_svg.h"

void rp_svg_escape(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* XML 1.0 forbids most control characters: drop them */
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n') fputc(*s, f);
        }
    }
}

static void head(FILE *f, double w, double h, const char *title)
{
    double tw = 20 + 8.5 * (double)strlen(title ? title : ""); /* 14px bold sans-serif: about 8.5px a character */
    if (w < tw) w = tw;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", w, h, w, h);
    fputs("<title>", f);
    rp_svg_escape(f, title);
    fputs("</title>\n", f);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", w, h);
    fputs("<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">", f);
    rp_svg_escape(f, title);
    fputs("</text>\n", f);
}

static int tail(FILE *f)
{
    fputs("</svg>\n", f);
    fflush(f);
    return ferror(f) ? -1 : 0;
}

/* ------------------------------------------------------------------------- */
/* histogram                                                                 */

static const char *bar_fill[4] = { "#4c9a2a", "#e8a33d", "#d62728", "#7f7f7f" };

int rp_svg_histogram(FILE *f, const char *title, const char *xlabel, const rp_bin *bins, int nbins)
{
    const double bw = 18, left = 60, top = 60, ph = 220, bottom = 80;
    double w = left + nbins * bw + 30, h = top + ph + bottom;
    int64_t maxc = 0, total = 0;
    for (int i = 0; i < nbins; i++) {
        if (bins[i].count > maxc) maxc = bins[i].count;
        total += bins[i].count;
    }
    /* y: log10(1 + count), top of the axis at the next power of ten */
    int decades = 1;
    while (decades < 19 && pow(10, decades) < (double)maxc + 1) decades++;
    double ymax = decades;
    head(f, w, h, title);
    fprintf(f, "<text x=\"10\" y=\"38\" fill=\"#444444\">%lld elements; bar height on a log scale (log10(1 + count)); "
               "the count is in each bar's tooltip</text>\n", (long long)total);
    /* axes and decade lines */
    fprintf(f, "<g stroke=\"#cccccc\" stroke-width=\"1\">\n");
    for (int k = 0; k <= decades; k++) {
        double y = top + ph - ph * k / ymax;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", left, y, left + nbins * bw, y);
    }
    fprintf(f, "</g>\n<g text-anchor=\"end\" font-size=\"9\">\n");
    for (int k = 0; k <= decades; k++) {
        double y = top + ph - ph * k / ymax;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">1e%d</text>\n", left - 4, y + 3, k);
    }
    fprintf(f, "</g>\n<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000000\"/>\n", left, top + ph,
            left + nbins * bw, top + ph);
    fprintf(f, "<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" text-anchor=\"middle\">elements (1 + count, log)</text>\n",
            top + ph / 2, top + ph / 2);
    /* bars */
    for (int i = 0; i < nbins; i++) {
        const rp_bin *b = &bins[i];
        double x = left + i * bw;
        double bh = b->count > 0 ? ph * log10(1.0 + (double)b->count) / ymax : 0;
        int kind = b->kind >= 0 && b->kind <= 3 ? (int)b->kind : 3;
        fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" data-label=\"",
                x + 2, top + ph - bh, bw - 4, bh, bar_fill[kind]);
        rp_svg_escape(f, b->label);
        fprintf(f, "\" data-count=\"%lld\"><title>", (long long)b->count);
        rp_svg_escape(f, b->what ? b->what : b->label);
        fprintf(f, ": %lld</title></rect>\n", (long long)b->count);
        if (b->count > 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"8\" transform=\"rotate(-90 %.1f %.1f)\">%lld</text>\n",
                    x + bw / 2 + 3, top + ph - bh - 3, x + bw / 2 + 3, top + ph - bh - 3, (long long)b->count);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\" transform=\"rotate(-60 %.1f %.1f)\">",
                x + bw / 2 + 3, top + ph + 10, x + bw / 2 + 3, top + ph + 10);
        rp_svg_escape(f, b->label);
        fputs("</text>\n", f);
    }
    if (xlabel) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", left + nbins * bw / 2, h - 8);
        rp_svg_escape(f, xlabel);
        fputs("</text>\n", f);
    }
    return tail(f);
}

/* ------------------------------------------------------------------------- */
/* heat map                                                                  */

/* colour of a ratio: see rp_svg.h */
static void cell_fill(double v, char out[8])
{
    if (v < 0) { snprintf(out, 8, "#eeeeee"); return; }
    if (isinf(v) || isnan(v)) { snprintf(out, 8, "#000000"); return; }
    if (v > 1) { snprintf(out, 8, "#d62728"); return; }
    double t = v > 0x1p-24 ? (log2(v) + 24) / 24 : 0;
    int r = (int)lround(255 + t * (204 - 255)), g = (int)lround(247 + t * (85 - 247)), b = (int)lround(220 + t * (0 - 220));
    snprintf(out, 8, "#%02x%02x%02x", r, g, b);
}

static void range_label(char *buf, size_t n, int64_t i, int64_t step, int64_t total)
{
    int64_t first = i * step, last = first + step;
    if (last > total) last = total;
    last--;
    if (last <= first) snprintf(buf, n, "%lld", (long long)first);
    else snprintf(buf, n, "%lld-%lld", (long long)first, (long long)last);
}

int rp_svg_heatmap(FILE *f, const rp_heatmap *hm)
{
    int rows = hm->rows > 0 ? hm->rows : 0, cols = hm->cols > 0 ? hm->cols : 0;
    double cw = cols ? 560.0 / cols : 28, ch = rows ? 320.0 / rows : 28;
    if (cw > 28) cw = 28;
    if (cw < 14) cw = 14;
    if (ch > 28) ch = 28;
    if (ch < 14) ch = 14;
    const double left = 110, top = 66;
    double pw = cols * cw, phh = rows * ch;
    double w = left + pw + 40, h = top + phh + 80 + 50;
    if (w < 620) w = 620;
    head(f, w, h, hm->title);
    if (hm->subtitle) {
        fputs("<text x=\"10\" y=\"38\" fill=\"#444444\">", f);
        rp_svg_escape(f, hm->subtitle);
        fputs("</text>\n", f);
    }
    fputs("<text x=\"10\" y=\"54\" fill=\"#444444\">rows: ", f);
    rp_svg_escape(f, hm->row_name);
    fputs("; columns: ", f);
    rp_svg_escape(f, hm->col_name);
    fputs("; cell: worst |got - ref| / bound</text>\n", f);
    char lab[64], fill[8];
    for (int r = 0; r < rows; r++) {
        range_label(lab, sizeof lab, r, hm->row_step, hm->row_total);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"9\">", left - 4, top + r * ch + ch / 2 + 3);
        rp_svg_escape(f, lab);
        fputs("</text>\n", f);
        for (int c = 0; c < cols; c++) {
            double v = hm->v[(size_t)r * (size_t)hm->ld + (size_t)c];
            cell_fill(v, fill);
            char val[32], cl[64];
            if (v < 0) snprintf(val, sizeof val, "none");
            else if (isinf(v) || isnan(v)) snprintf(val, sizeof val, "inf");
            else snprintf(val, sizeof val, "%.4g", v);
            range_label(cl, sizeof cl, c, hm->col_step, hm->col_total);
            fprintf(f, "<rect class=\"cell\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"#ffffff\" "
                       "data-row=\"%d\" data-col=\"%d\" data-ratio=\"%s\"><title>",
                    left + c * cw, top + r * ch, cw, ch, fill, r, c, val);
            rp_svg_escape(f, hm->row_name);
            fprintf(f, " %s, ", lab);
            rp_svg_escape(f, hm->col_name);
            fprintf(f, " %s: %s%s</title></rect>\n", cl, v < 0 ? "no element judged" : val,
                    isinf(v) ? " (non-finite mismatch)" : "");
        }
    }
    /* column labels: at most about 16 */
    int every = cols > 16 ? (cols + 15) / 16 : 1;
    for (int c = 0; c < cols; c += every) {
        range_label(lab, sizeof lab, c, hm->col_step, hm->col_total);
        double x = left + c * cw + cw / 2 + 3, y = top + phh + 8;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\" transform=\"rotate(-60 %.1f %.1f)\">%s</text>\n",
                x, y, x, y, lab);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", left + pw / 2, top + phh + 56);
    rp_svg_escape(f, hm->col_name);
    fprintf(f, "</text>\n<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" text-anchor=\"middle\">", top + phh / 2,
            top + phh / 2);
    rp_svg_escape(f, hm->row_name);
    fputs("</text>\n", f);
    /* legend */
    static const double lv[] = { -1, 0x1p-24, 0x1p-16, 0x1p-8, 0x1p-4, 0.5, 1, 2, INFINITY };
    static const char *ln[] = { "none", "2^-24", "2^-16", "2^-8", "2^-4", "0.5", "1", "> 1", "non-finite" };
    double ly = top + phh + 72;
    for (int i = 0; i < 9; i++) {
        cell_fill(lv[i], fill);
        double x = 10 + i * 66;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"#999999\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">", x, ly, fill, x + 18, ly + 11);
        rp_svg_escape(f, ln[i]);
        fputs("</text>\n", f);
    }
    return tail(f);
}
