#!/usr/bin/env python3
"""report_check.py DIR [--want-heat-fail]: the plots of a `flashcheck certify` report.

report.md must link SVGs with relative paths (plots/NAME.svg); every linked file must exist,
be well-formed XML (an SVG with no script and no external reference) and carry its data; the
five histograms must be there (the CPU backend has a backward). With --want-heat-fail, a heat
map must show a cell above 1 (a failing block) and the report must say what its axes are."""
import os
import re
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
d = sys.argv[1]
want_fail = "--want-heat-fail" in sys.argv
md = open(os.path.join(d, "report.md"), encoding="utf-8").read()
links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
bad = []
if not links:
    bad.append("report.md links no plot")
for l in links:
    if not re.fullmatch(r"plots/[a-z0-9-]+\.svg", l):
        bad.append(f"link {l} is not a relative plots/NAME.svg path")
        continue
    p = os.path.join(d, l)
    if not os.path.isfile(p):
        bad.append(f"{l} is linked but missing")
        continue
    text = open(p, encoding="utf-8").read()
    root = ET.fromstring(text)
    if root.tag != NS + "svg":
        bad.append(f"{l}: not an SVG")
    for s in ("<script", "href=", "url(", "@import", "@font-face"):
        if s in text:
            bad.append(f"{l}: contains {s}")
hists = [l for l in links if "/hist-" in l]
if sorted(hists) != sorted(f"plots/hist-{t}.svg" for t in ("o", "lse", "dq", "dk", "dv")):
    bad.append(f"histograms linked: {hists}")
total = 0
for l in hists:
    root = ET.parse(os.path.join(d, l)).getroot()
    n = sum(int(r.get("data-count")) for r in root.iter(NS + "rect") if r.get("class") == "bar")
    if n <= 0:
        bad.append(f"{l}: no element counted")
    total += n
heats = [l for l in links if "/heat-" in l]
worst = 0.0
for l in heats:
    root = ET.parse(os.path.join(d, l)).getroot()
    for r in root.iter(NS + "rect"):
        if r.get("class") == "cell" and r.get("data-ratio") not in ("none",):
            worst = max(worst, float(r.get("data-ratio")))
if want_fail:
    if worst <= 1:
        bad.append(f"no heat-map cell above 1 (worst {worst}) in {heats}")
    if "rows are heads" not in md or "query positions" not in md:
        bad.append("report.md does not state the heat maps' axes")
print(f"{len(links)} plots linked, {total} histogram elements, {len(heats)} heat maps, worst cell {worst}")
for b in bad:
    print("FAIL  " + b)
sys.exit(1 if bad else 0)
