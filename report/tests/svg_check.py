#!/usr/bin/env python3
"""svg_check.py OUTDIR: checks the SVGs written by svg_demo (report/tests/svg_demo.c).

Every SVG must be well-formed XML (xml.etree), an <svg> in the SVG namespace, with no
<script>, no event handler attribute, no href, no url(), no @import or @font-face (a
Markdown viewer renders it as a plain image). The data written by svg_demo must come
back from the data attributes and titles. Every plot linked from rep/plots.md exists."""
import os
import re
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
out = sys.argv[1]
fails = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        fails.append(what)


def load(path):
    text = open(path, encoding="utf-8").read()
    path = os.path.relpath(path, out)
    root = ET.fromstring(text)  # raises on malformed XML
    check(root.tag == NS + "svg", f"{path}: root is an SVG <svg>")
    for el in root.iter():
        check(el.tag != NS + "script", f"{path}: no <script>") if el.tag == NS + "script" else None
        for k, v in el.attrib.items():
            if k.lower().startswith("on") or k.endswith("href") or "url(" in v:
                check(False, f"{path}: attribute {k}={v!r} refers outside or runs code")
    for bad in ("<script", "@import", "@font-face", "xlink:href", "href="):
        check(bad not in text, f"{path}: no {bad}")
    return root


hist = load(os.path.join(out, "hist.svg"))
bars = [e for e in hist.iter(NS + "rect") if e.get("class") == "bar"]
check([b.get("data-count") for b in bars] == ["0", "1", "7", "123456789", "42"], "histogram: bar counts")
check([b.get("data-label") for b in bars] == ["exact", "2^-3", "a<b&c", "big", ">=2^4"], "histogram: labels (escaped)")
titles = [b.find(NS + "title").text for b in bars]
check(titles[2] == "quote \" and 'apos': 7" and titles[1] == "[2^-3, 2^-2): 1", "histogram: tooltips carry the counts")
heights = [float(b.get("height")) for b in bars]
check(heights[0] == 0 and 0 < heights[1] < heights[2] < heights[4] < heights[3], "histogram: heights grow with counts")
check(hist.find(NS + "title").text == "histogram <test> & co", "histogram: title")

heat = load(os.path.join(out, "heat.svg"))
cells = [e for e in heat.iter(NS + "rect") if e.get("class") == "cell"]
got = {(int(c.get("data-row")), int(c.get("data-col"))): c.get("data-ratio") for c in cells}
check(got == {(0, 0): "none", (0, 1): "0", (0, 2): "0.25", (1, 0): "0.75", (1, 1): "2", (1, 2): "inf"},
      "heat map: 2 x 3 cells with their ratios (the padding column is not drawn)")
fills = {(int(c.get("data-row")), int(c.get("data-col"))): c.get("fill") for c in cells}
check(fills[(1, 2)] == "#000000" and fills[(1, 1)] == "#d62728" and fills[(0, 0)] == "#eeeeee",
      "heat map: non-finite black, above 1 red, empty grey")
tt = {(int(c.get("data-row")), int(c.get("data-col"))): c.find(NS + "title").text for c in cells}
check(tt[(1, 2)].startswith("query head 1, query position 32-39: inf"), f"heat map: tooltip names the block ({tt[(1, 2)]!r})")

md = open(os.path.join(out, "rep", "plots.md"), encoding="utf-8").read()
links = re.findall(r"!\[[^\]]*\]\((plots/[^)]+\.svg)\)", md)
check(len(links) == 4, f"rp_plots: 2 histograms (O, dK) + 2 heat maps linked ({links})")
for l in links:
    p = os.path.join(out, "rep", l)
    check(os.path.isfile(p), f"rp_plots: {l} exists")
    load(p)
check("- LSE: not checked" in md, "rp_plots: unchecked tensors are named, not plotted")
h = load(os.path.join(out, "rep", "plots", "hist-o.svg"))
counts = {b.get("data-label"): int(b.get("data-count")) for b in h.iter(NS + "rect") if b.get("class") == "bar"}
check(counts["exact"] == 30 and counts["<2^-30"] == 10 and counts["2^-1"] == 60 and sum(counts.values()) == 100,
      f"rp_plots: O histogram bins from the oracle buckets ({counts['exact']}, {counts['<2^-30']}, {counts['2^-1']})")
check(links[2].endswith("heat-01-dk.svg") and links[3].endswith("heat-02-o.svg"),
      "rp_plots: heat maps worst first (a non-finite mismatch before ratio 0.75)")

print(f"{len(fails)} failed")
sys.exit(1 if fails else 0)
