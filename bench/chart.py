"""The benchmark chart as a hand-written SVG (no plotting library needed).

Three panels: every workload relative to the raw HTTP floor (one scale,
higher is better, 1.0 = the floor), cold start in milliseconds (log scale),
and memory in MiB.
"""

from __future__ import annotations

import math
from html import escape

COLOURS = {"epp": "#2563eb", "sdk": "#ea580c", "raw": "#6b7280"}
LABELS = {"epp": "epp-host", "sdk": "Python SDK (asyncio)", "raw": "raw HTTP floor"}
WIDTH = 960
LEFT = 300  # label column
RIGHT = 150  # room for value labels
BAR = 11
GAP = 3


class Svg:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.y = 0

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", weight="normal", fill="#111827") -> None:
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                 f'font-weight="{weight}" fill="{fill}">{escape(s)}</text>')

    def rect(self, x, y, w, h, fill) -> None:
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{h}" fill="{fill}" rx="2"/>')

    def line(self, x1, y1, x2, y2, stroke="#9ca3af", dash="") -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"{d}/>')


def legend(s: Svg) -> None:
    x = LEFT
    for c in ("epp", "sdk", "raw"):
        s.rect(x, s.y - 10, 12, 12, COLOURS[c])
        s.text(x + 18, s.y, LABELS[c])
        x += 190
    s.y += 22


def panel_relative(s: Svg, st) -> None:
    e, p, r = st.m["epp"], st.m["sdk"], st.m["raw"]
    # (label, per-contender (speed relative to raw, absolute text), target as relative speed)
    def num(x: float) -> str:
        return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"

    # Bars: the median over rounds of the ratio within a round (as in the tables).
    def t(key, unit):  # time-like: lower is better → raw / x
        return {c: (1 / st.paired(key, c, "raw")[0], f"{num(st.m[c][key] / 1000)} {unit}") for c in st.m}

    def v(key):  # throughput: higher is better → x / raw
        return {c: (st.paired(key, c, "raw")[0], f"{num(st.m[c][key])} MiB/s") for c in st.m}

    rows = [
        ("2. commands.run \"true\", p50", t("run_p50", "ms"), 1 / 1.3),
        ("2. commands.run \"true\", p99", t("run_p99", "ms"), None),
        ("8. sessions.run \"true\", p50", t("session_p50", "ms"), 1 / 1.3),
        ("3. stream 64 MiB of stdout", v("stream"), 0.8),
        ("4. write a 32 MiB file", v("write"), 0.8),
        ("4. read a 32 MiB file", v("read"), 0.8),
        ("5. 64 concurrent runs, wall", t("conc_wall", "ms"), None),
        ("5. 64 concurrent runs, p99", t("conc_p99", "ms"), None),
        ("6. create → ready → kill", t("cycle", "ms"), None),
    ]
    top = max(1.2, max(val for _, d, _ in rows for val, _ in d.values()) * 1.05)
    span = WIDTH - LEFT - RIGHT
    x_of = lambda f: LEFT + span * f / top  # noqa: E731
    s.text(20, s.y, "Speed relative to the raw HTTP floor (1.0 = floor, higher is better)", 15, weight="bold")
    s.y += 10
    y0 = s.y
    for label, data, target in rows:
        s.text(LEFT - 10, s.y + 2 * (BAR + GAP) - 1, label, anchor="end")
        for i, c in enumerate(("epp", "sdk", "raw")):
            val, absolute = data[c]
            y = s.y + i * (BAR + GAP)
            s.rect(LEFT, y, x_of(val) - LEFT, BAR, COLOURS[c])
            s.text(x_of(val) + 5, y + BAR - 1, f"{val:.2f}× ({absolute})", 10, fill="#374151")
        if target is not None:
            tx = x_of(target)
            s.line(tx, s.y - 3, tx, s.y + 3 * (BAR + GAP) - GAP, stroke="#16a34a", dash="2 2")
            s.text(tx, s.y - 5, "target", 9, anchor="middle", fill="#16a34a")
        s.y += 3 * (BAR + GAP) + 14
    s.line(x_of(1.0), y0 - 4, x_of(1.0), s.y - 10, dash="4 3")
    s.y += 10


def panel_start(s: Svg, st) -> None:
    from report import median  # late: report imports this module
    rows = [("epp-host, warm compile cache", "epp_warm", COLOURS["epp"]),
            ("epp-host --no-cache", "epp_nocache", COLOURS["epp"]),
            ("python -c \"import opensandbox\"", "sdk_import", COLOURS["sdk"]),
            ("python -c pass", "python_bare", COLOURS["raw"])]
    rows = [(label, median(st.start(k)) / 1000, colour) for label, k, colour in rows if st.start(k)]
    s.text(20, s.y, "1. Cold start: spawn → first answer (ms, log scale)", 15, weight="bold")
    s.y += 12
    span = WIDTH - LEFT - RIGHT
    lo, hi = 1.0, 10 ** math.ceil(math.log10(max(v for _, v, _ in rows) * 1.1))
    x_of = lambda v: LEFT + span * (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))  # noqa: E731
    for label, value, colour in rows:
        s.text(LEFT - 10, s.y + BAR - 1, label, anchor="end")
        s.rect(LEFT, s.y, x_of(value) - LEFT, BAR, colour)
        s.text(x_of(value) + 5, s.y + BAR - 1, f"{value:.1f} ms", 10, fill="#374151")
        s.y += BAR + 8
    tick = lo
    while tick <= hi:
        s.line(x_of(tick), s.y, x_of(tick), s.y + 4)
        s.text(x_of(tick), s.y + 15, f"{tick:g}", 9, anchor="middle", fill="#6b7280")
        tick *= 10
    s.line(x_of(25), s.y - 4 - len(rows) * (BAR + 8), x_of(25), s.y, stroke="#16a34a", dash="3 2")
    s.text(x_of(25), s.y + 27, "25 ms target", 9, anchor="middle", fill="#16a34a")
    s.y += 48


def panel_memory(s: Svg, st, machine: dict) -> None:
    rows = [("7. idle RSS", "idle_rss"), ("7. peak RSS during workload 5", "conc_hwm")]
    top = max(st.m[c][k] for _, k in rows for c in st.m) / 1024 * 1.1
    span = WIDTH - LEFT - RIGHT
    x_of = lambda v: LEFT + span * v / top  # noqa: E731
    s.text(20, s.y, "7. Memory of the process that speaks HTTP (MiB)", 15, weight="bold")
    s.y += 12
    for label, key in rows:
        s.text(LEFT - 10, s.y + 2 * (BAR + GAP) - 1, label, anchor="end")
        for i, c in enumerate(("epp", "sdk", "raw")):
            val = st.m[c][key] / 1024
            y = s.y + i * (BAR + GAP)
            s.rect(LEFT, y, x_of(val) - LEFT, BAR, COLOURS[c])
            s.text(x_of(val) + 5, y + BAR - 1, f"{val:.1f} MiB", 10, fill="#374151")
        s.y += 3 * (BAR + GAP) + 14
    s.text(LEFT, s.y + 4, f"component: {machine['component_bytes']:,} bytes (target ≤ 1 MiB); "
                          f"idle RSS target ≤ 30 MiB", 11, fill="#374151")
    s.y += 20


def svg(st, data: dict) -> str:
    s = Svg()
    s.y = 30
    m = data["machine"]
    s.text(20, s.y, "epp-host vs the official Python SDK vs a raw HTTP client — same testbed, same sandboxes",
           17, weight="bold")
    s.y += 20
    rounds = data["config"]["rounds"]
    s.text(20, s.y, f"{m['date']}, {m['cores']} cores, {m['cpu']}; bars: the median over {rounds} interleaved "
                    "rounds of each round's ratio; labels: medians", 11, fill="#4b5563")
    s.y += 26
    legend(s)
    panel_relative(s, st)
    panel_start(s, st)
    panel_memory(s, st, m)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{s.y + 10}" '
            f'viewBox="0 0 {WIDTH} {s.y + 10}" font-family="Helvetica, Arial, sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/>')
    return head + "".join(s.parts) + "</svg>\n"
