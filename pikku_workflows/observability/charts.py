"""SVG charts drawn on the server for the admin's dashboard (pure: no queries, no JavaScript):
columns over time, stacked by series, and rows per name with one bar per series. Every mark
may link somewhere (the run list, filtered to what it counts)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 640
HEIGHT = 220
MARGIN_LEFT = 48
MARGIN_TOP = 10
MARGIN_RIGHT = 16
MARGIN_BOTTOM = 28
ROW_HEIGHT = 22
LABEL_WIDTH = 200
# Colours that stay apart for colour-blind readers (Okabe-Ito), one per series.
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9")


@dataclass(frozen=True)
class Mark:
    """One column or row: its label, a value per series, and where it links (None: nowhere)."""

    label: str
    values: tuple[float, ...]
    link: str | None = None


def column_chart(marks: Sequence[Mark], series: Sequence[str], unit: str = "") -> str:
    """Columns left to right (time), each stacking its series' values."""
    top = max((sum(mark.values) for mark in marks), default=0.0) or 1.0
    plot_width, plot_height = (
        WIDTH - MARGIN_LEFT - MARGIN_RIGHT,
        HEIGHT - MARGIN_BOTTOM - MARGIN_TOP,
    )
    step = plot_width / max(len(marks), 1)
    parts = [_axis(top, unit, plot_height)]
    every = max(1, len(marks) // 8)  # at most about eight labels along the bottom
    for index, mark in enumerate(marks):
        x = MARGIN_LEFT + index * step
        base = float(MARGIN_TOP + plot_height)
        bars = []
        for number, value in enumerate(mark.values):
            height = plot_height * value / top
            base -= height
            bars.append(
                f'<rect x="{x + 1:.1f}" y="{base:.1f}" width="{max(step - 2, 1):.1f}" '
                f'height="{height:.1f}" fill="{PALETTE[number % len(PALETTE)]}">'
                f"<title>{escape(mark.label)} {escape(series[number])}: {_number(value)}{unit}</title></rect>"
            )
        parts.append(_linked(mark.link, "".join(bars)))
        if index % every == 0:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle" '
                f'class="pikku-chart-label">{escape(mark.label)}</text>'
            )
    return _svg(WIDTH, HEIGHT, "".join(parts), series)


def row_chart(marks: Sequence[Mark], series: Sequence[str], unit: str = "") -> str:
    """One row per mark (a workflow, a function), its series' values as bars side by side."""
    top = max((max(mark.values, default=0.0) for mark in marks), default=0.0) or 1.0
    bar_width = WIDTH - LABEL_WIDTH - 60
    band = ROW_HEIGHT * max(len(series), 1) * 0.7 + 8
    height = max(int(band * len(marks)) + 8, 40)
    parts = []
    for index, mark in enumerate(marks):
        y = 4 + index * band
        parts.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{y + band / 2:.1f}" text-anchor="end" '
            f'class="pikku-chart-label">{escape(_shortened(mark.label))}</text>'
        )
        bars = []
        thickness = (band - 8) / max(len(mark.values), 1)
        for number, value in enumerate(mark.values):
            width = bar_width * value / top
            bar_y = y + number * thickness
            bars.append(
                f'<rect x="{LABEL_WIDTH}" y="{bar_y:.1f}" width="{max(width, 1):.1f}" '
                f'height="{max(thickness - 1, 1):.1f}" fill="{PALETTE[number % len(PALETTE)]}">'
                f"<title>{escape(mark.label)} {escape(series[number])}: {_number(value)}{unit}</title></rect>"
                f'<text x="{LABEL_WIDTH + width + 4:.1f}" y="{bar_y + thickness - 2:.1f}" '
                f'class="pikku-chart-value">{_number(value)}{unit}</text>'
            )
        parts.append(_linked(mark.link, "".join(bars)))
    return _svg(WIDTH, height, "".join(parts), series)


def _axis(top: float, unit: str, plot_height: float) -> str:
    lines = []
    for fraction in (0.0, 0.5, 1.0):
        y = MARGIN_TOP + plot_height - plot_height * fraction
        lines.append(
            f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - MARGIN_RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="pikku-chart-grid"/>'
            f'<text x="{MARGIN_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" '
            f'class="pikku-chart-label">{_number(top * fraction)}{unit}</text>'
        )
    return "".join(lines)


def _linked(link: str | None, content: str) -> str:
    return f'<a href="{escape(link)}">{content}</a>' if link else content


def _svg(width: int, height: int, content: str, series: Sequence[str]) -> str:
    legend = "".join(
        f'<span class="pikku-chart-key"><i style="background:{PALETTE[n % len(PALETTE)]}"></i>'
        f"{escape(name)}</span>"
        for n, name in enumerate(series)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'class="pikku-chart" role="img">{content}</svg>'
        + (f'<div class="pikku-chart-legend">{legend}</div>' if len(series) > 1 else "")
    )


def _number(value: float) -> str:
    """Short figures: 3, 12.5, 1.2k."""
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if value == int(value) or abs(value) >= 100 else f"{value:.2g}"


def _shortened(label: str, limit: int = 32) -> str:
    return label if len(label) <= limit else "…" + label[-(limit - 1) :]
