"""The timeline chart's rows, gathers shown as what they are: a `wf.map`'s items collapsed into
one row with counts (every item's bars drawn over each other, the items' own lanes one click
away), a `wf.gather`'s members marked as one group whose lanes run side by side. Pure: from
the chart's lanes and each step's gather and status."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..step_keys import parse_instance_key
from .timeline import Bar, Lane


@dataclass
class LaneGroup:
    """A map's items as one row: `label` (`charge[…]`), how many items and how they stand."""

    label: str
    counts: str
    lanes: list[Lane]
    bars: list[Bar] = field(default_factory=list)


@dataclass
class GatheredLane:
    """A lane of a gather's member: `gather` is the gather's key, `first` its first member."""

    lane: Lane
    gather: str
    first: bool


def chart_rows(
    lanes: list[Lane], members: Mapping[str, tuple[str | None, str]]
) -> list[Lane | LaneGroup | GatheredLane]:
    """`lanes` in order, a map's item lanes folded into one LaneGroup where the first item
    stands, a gather's member lanes marked; `members` is each step's (gather key, status)."""
    items: dict[str, list[Lane]] = {}
    for lane in lanes:
        gather, _ = members.get(lane.step_key, (None, ""))
        if gather is not None and _is_item_of(lane.step_key, gather):
            items.setdefault(gather, []).append(lane)
    rows: list[Lane | LaneGroup | GatheredLane] = []
    seen: set[str] = set()
    for lane in lanes:
        gather, _ = members.get(lane.step_key, (None, ""))
        if gather is None:
            rows.append(lane)
        elif gather in items:
            if gather not in seen:
                rows.append(_group(gather, items[gather], members))
        else:
            rows.append(GatheredLane(lane, gather, first=gather not in seen))
        if gather is not None:
            seen.add(gather)
    return rows


def _is_item_of(key: str, gather: str) -> bool:
    parsed = parse_instance_key(key)
    return parsed is not None and parsed.item is not None and key.startswith(f"{gather}[")


def _group(
    gather: str, lanes: list[Lane], members: Mapping[str, tuple[str | None, str]]
) -> LaneGroup:
    statuses = Counter(members[lane.step_key][1] for lane in lanes)
    counts = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    return LaneGroup(
        label=f"{gather}[…]",
        counts=f"{len(lanes)} items: {counts}",
        lanes=lanes,
        bars=[bar for lane in lanes for bar in lane.bars],
    )
