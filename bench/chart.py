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


def streamed_rows(data: dict) -> list:
    """Issue 24's streamed files (files_big), as rows of the relative panel: each
    contender's MiB/s over the raw floor's, paired per round."""
    from report import per_round_ratio, w24_stats  # late: report imports this module
    big = w24_stats(data).get("big", {})
    rows = []
    for size in big.get("sizes", []):
        r = big[size]
        for way in ("write", "read"):
            if ("raw", way) not in r:
                continue
            cells = {}
            for c in ("epp", "sdk", "raw"):
                if (c, way) not in r:
                    cells[c] = (0.0, "–")
                    continue
                ratio = per_round_ratio(r[(c, way)], r[("raw", way)])[0]
                cells[c] = (0.0 if math.isnan(ratio) else ratio, f"{r[(c, way, 'mid')]:.0f} MiB/s")
            rows.append((f"24. {way} {size >> 20} MiB, streamed", cells, 0.8))
    return rows


def panel_relative(s: Svg, st, extra: list = ()) -> None:
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
        ("2. commands.run \"true\", p50", t("run_p50", "ms"), 1 / 1.1),
        ("2. commands.run \"true\", p99", t("run_p99", "ms"), None),
        ("8. sessions.run \"true\", p50", t("session_p50", "ms"), 1 / 1.2),
        ("3. stream 64 MiB of stdout", v("stream"), 0.8),
        ("4. write a 32 MiB file", v("write"), 0.8),
        ("4. read a 32 MiB file", v("read"), 0.8),
        ("5. 64 concurrent runs, wall", t("conc_wall", "ms"), None),
        ("5. 64 concurrent runs, p99", t("conc_p99", "ms"), None),
        ("6. create → ready → kill", t("cycle", "ms"), None),
    ] + list(extra)
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
    s.line(x_of(15), s.y - 4 - len(rows) * (BAR + 8), x_of(15), s.y, stroke="#16a34a", dash="3 2")
    s.text(x_of(15), s.y + 27, "15 ms target", 9, anchor="middle", fill="#16a34a")
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
                          f"idle RSS target ≤ 16 MiB", 11, fill="#374151")
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
    panel_relative(s, st, streamed_rows(data))
    panel_start(s, st)
    panel_memory(s, st, m)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{s.y + 10}" '
            f'viewBox="0 0 {WIDTH} {s.y + 10}" font-family="Helvetica, Arial, sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/>')
    return head + "".join(s.parts) + "</svg>\n"


# ---------------------------------------------------------------- issue 24: the scaling curve

SCALE_WIDTH = 960
PANEL_W, PANEL_H = 270, 190


def log_axis(lo: float, hi: float) -> list[float]:
    """Ticks 1, 2, 5 × 10^k between lo and hi."""
    ticks, k = [], math.floor(math.log10(max(lo, 1e-9)))
    while 10 ** k <= hi * 1.0001:
        for m in (1, 2, 5):
            v = m * 10 ** k
            if lo <= v <= hi:
                ticks.append(v)
        k += 1
    return ticks


def lin_axis(hi: float) -> list[float]:
    """0 and round steps (1, 2, 5 × 10^k) up to hi, 3-6 of them."""
    step = 10 ** math.floor(math.log10(max(hi, 1e-9) / 5))
    for m in (1, 2, 5, 10):
        if hi / (m * step) <= 6:
            step *= m
            break
    return [k * step for k in range(int(hi // step) + 1)]


def line_panel(s: Svg, x0: float, y0: float, title: str, series: dict, levels: list, unit: str,
               log_y: bool = True, target=None) -> None:
    """One small panel: x = concurrency (log2), y = value (log10 or linear); `series`
    maps a label to (colour, dash, [value per level or None])."""
    s.text(x0, y0 - 8, f"{title} ({unit})", 12, weight="bold")
    vals = [v for _, _, vs in series.values() for v in vs if v]
    if target is not None:
        vals.append(target)
    if not vals:
        return
    lo, hi = (min(vals) / 1.3, max(vals) * 1.3) if log_y else (0, max(vals) * 1.15)
    fy = ((lambda v: (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))) if log_y
          else (lambda v: (v - lo) / (hi - lo)))
    xs = [math.log2(n) for n in levels]
    xlo, xhi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    px = lambda n: x0 + 40 + (PANEL_W - 50) * (math.log2(n) - xlo) / (xhi - xlo)  # noqa: E731
    py = lambda v: y0 + PANEL_H - 25 - (PANEL_H - 35) * fy(v)  # noqa: E731
    s.line(x0 + 40, y0 + PANEL_H - 25, x0 + PANEL_W - 10, y0 + PANEL_H - 25)
    s.line(x0 + 40, y0, x0 + 40, y0 + PANEL_H - 25)
    for n in levels:
        s.text(px(n), y0 + PANEL_H - 12, str(n), 9, anchor="middle", fill="#6b7280")
    ticks = log_axis(lo, hi) if log_y else lin_axis(hi)
    for t in ticks:
        s.line(x0 + 37, py(t), x0 + PANEL_W - 10, py(t), stroke="#e5e7eb")
        s.text(x0 + 34, py(t) + 3, f"{t:g}" if t >= 1 else f"{t:.2g}", 9, anchor="end", fill="#6b7280")
    if target is not None:
        s.line(x0 + 40, py(target), x0 + PANEL_W - 10, py(target), stroke="#16a34a", dash="3 2")
        s.text(x0 + PANEL_W - 12, py(target) - 3, "target", 9, anchor="end", fill="#16a34a")
    for colour, dash, vs in series.values():
        pts = [(px(n), py(v)) for n, v in zip(levels, vs) if v]
        if len(pts) > 1:
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            extra = f' stroke-dasharray="{dash}"' if dash else ""
            s.add(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="2"{extra}/>')
        for x, y in pts:
            s.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>')


def scaling_svg(w24: dict, data: dict) -> str:
    """Issue 24's scaling curve: per series (runs over 8 and over 32 sandboxes, streamed
    reads) the wall time and the per-call p99 per level for every contender, and
    epp-host's peak RSS per level; medians over rounds (p99: pooled)."""
    from report import paired_median  # late: report imports this module
    s = Svg()
    s.y = 30
    m = data.get("machine", {})
    when = data.get("steps", {}).get("scaling", {}).get("date", m.get("date", ""))
    s.text(20, s.y, "Scaling: epp-host vs the Python SDK vs the raw HTTP floor, by concurrent calls", 17,
           weight="bold")
    s.y += 20
    s.text(20, s.y, f"{when}, {m.get('cores', '?')} cores; x: concurrent calls (log); "
                    "y: ms (log); solid: wall of a batch, dashed: per-call p99", 11, fill="#4b5563")
    s.y += 26
    legend(s)
    panels = []
    for key, prefix_title in (("scale_run", "commands.run \"true\""), ("scale_read", "streamed files.read")):
        sc = w24.get(key)
        if not sc:
            continue
        groups: dict = {}
        for k in sc["keys"]:
            series, n = k.split("x")
            groups.setdefault(series, []).append(int(n))
        for series, levels in groups.items():
            panels.append((f"{prefix_title}, {series} sandboxes", sc, series, levels))
    y0 = s.y + 14
    for i, (title, sc, series, levels) in enumerate(panels):
        x0 = 20 + (i % 3) * (PANEL_W + 40)
        if i and i % 3 == 0:
            y0 += PANEL_H + 40
        lines = {}
        for c in ("epp", "sdk", "raw"):
            for metric, dash in (("wall_mid", ""), ("p99_pooled", "4 3")):
                vals = [sc.get((c, f"{series}x{n}"), {}).get(metric) for n in levels]
                lines[(c, metric)] = (COLOURS[c], dash, [v / 1000 if v else None for v in vals])
        line_panel(s, x0, y0, title, lines, levels, "ms")
    s.y = y0 + PANEL_H + 40
    # epp-host's peak RSS per level, every series in one panel.
    rss, all_levels = {}, sorted({n for _, _, _, lv in panels for n in lv})
    shades = ["#2563eb", "#60a5fa", "#1e3a8a", "#93c5fd"]
    for i, (title, sc, series, levels) in enumerate(panels):
        vals = []
        for n in all_levels:
            got = sc.get(("epp", f"{series}x{n}"))
            vals.append(paired_median(got["hwm"]) / 1024 if got else None)
        rss[title] = (shades[i % len(shades)], "" if i % 2 == 0 else "4 3", vals)
    if rss:
        y0 = s.y
        line_panel(s, 20, y0, "epp-host peak RSS (VmHWM) per level", rss, all_levels, "MiB",
                   log_y=False, target=64)
        ly = y0 + 10
        for title, (colour, dash, _) in rss.items():
            extra = f' stroke-dasharray="{dash}"' if dash else ""
            s.add(f'<line x1="{PANEL_W + 60}" y1="{ly - 4}" x2="{PANEL_W + 90}" y2="{ly - 4}" stroke="{colour}" '
                  f'stroke-width="2"{extra}/>')
            s.text(PANEL_W + 96, ly, title, 11)
            ly += 18
        s.text(PANEL_W + 60, ly + 8, "target at 256 concurrent runs: ≤ 64 MiB; wall ≤ 1.15× the raw floor", 11,
               fill="#16a34a")
        s.y = y0 + PANEL_H + 20
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{SCALE_WIDTH}" height="{s.y + 10}" '
            f'viewBox="0 0 {SCALE_WIDTH} {s.y + 10}" font-family="Helvetica, Arial, sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/>')
    return head + "".join(s.parts) + "</svg>\n"
