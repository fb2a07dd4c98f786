"""A graph workflow drawn as server-rendered SVG (no script, no external asset): nodes in columns
by their depth along forward edges, back edges dashed below, branch edges labelled. On a run
page each node takes the colour of its latest instance's status, the branches and edges the run
took are bold, and revisits and for_each items are counted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ..graph import GraphDefinition
from ..status import StepStatus
from ..step_keys import handled_key, instance_order, names_an_item, parse_instance_key

NODE_WIDTH = 168
NODE_HEIGHT = 50
COLUMN_GAP = 72
ROW_GAP = 28
MARGIN = 16
LOOP_DEPTH = 46
LEGEND_HEIGHT = 26

# The admin's status colours (admin.css), for SVG fills.
STATUS_FILL: dict[str, str] = {
    StepStatus.PENDING: "#718096",
    StepStatus.SCHEDULED: "#3182ce",
    StepStatus.RUNNING: "#2b6cb0",
    StepStatus.WAITING: "#b7791f",
    StepStatus.SUCCEEDED: "#2f855a",
    StepStatus.FAILED: "#c53030",
}
NOT_RUN_FILL = "#ffffff"
EDGE = "#a0aec0"
EDGE_TAKEN = "#2d3748"
ERROR_EDGE = "#c53030"


@dataclass
class NodeActivity:
    """What a run did at one node: its instances (visits, for_each items, error handler runs)
    in order, the status of the latest, how many succeeded, and the branches they chose."""

    instances: list[tuple[str, str]] = field(default_factory=list)  # (key, status)
    succeeded: int = 0
    branches: set[str] = field(default_factory=set)
    items: bool = False

    @property
    def status(self) -> str | None:
        return self.instances[-1][1] if self.instances else None


def node_activity(
    definition: GraphDefinition, steps: Iterable[tuple[str, str, str | None]]
) -> dict[str, NodeActivity]:
    """Each node's activity from a run's (step key, status, branch_taken) rows."""
    activity: dict[str, NodeActivity] = {}
    for key, status, branch in sorted(steps, key=lambda row: instance_order(row[0])):
        node_id = _node_of(definition, key)
        if node_id is None:
            continue
        node = activity.setdefault(node_id, NodeActivity())
        node.instances.append((key, status))
        node.items = node.items or names_an_item(key)
        if status == StepStatus.SUCCEEDED:
            node.succeeded += 1
            if branch is not None:
                node.branches.add(branch)
    return activity


def _node_of(definition: GraphDefinition, key: str) -> str | None:
    handled = handled_key(key)
    if handled is not None:
        # A handler instance belongs to the on_error node of the node that failed.
        failed = parse_instance_key(handled)
        source = definition.nodes.get(failed.node) if failed is not None else None
        return source.on_error if source is not None else None
    parsed = parse_instance_key(key)
    return parsed.node if parsed is not None and parsed.node in definition.nodes else None


def render_graph(
    definition: GraphDefinition,
    activity: dict[str, NodeActivity] | None = None,
    *,
    title: str = "",
    max_width: int | None = None,
) -> SafeString:
    """The SVG of `definition`; with `activity` (a run's), coloured by what the run did."""
    layout = _Layout(definition)
    drawing = _Drawing(definition, layout, activity)
    return drawing.svg(title, legend=activity is not None, max_width=max_width)


class _Layout:
    """Columns by the longest forward path from the entries; rows in order of discovery."""

    def __init__(self, definition: GraphDefinition) -> None:
        self.definition = definition
        topology = definition.topology
        self.column: dict[str, int] = {}
        order = self._forward_order()
        for node_id in order:
            predecessors = topology.forward_predecessors.get(node_id, ())
            placed = [self.column[p] + 1 for p in predecessors if p in self.column]
            self.column[node_id] = max(placed, default=self._handler_column(node_id))
        self.rows: dict[int, list[str]] = {}
        for node_id in order:
            self.rows.setdefault(self.column[node_id], []).append(node_id)
        self.columns = max(self.rows, default=0) + 1
        self.height = max((len(nodes) for nodes in self.rows.values()), default=1)

    def _forward_order(self) -> list[str]:
        """Every node once, entries first, each after its forward predecessors (the forward
        edges form no cycle: an edge whose target reaches its source is a back edge)."""
        predecessors = self.definition.topology.forward_predecessors
        waiting = {node: set(predecessors.get(node, ())) for node in self.definition.nodes}
        order: list[str] = []
        queue = list(self.definition.entry)
        while queue:
            node = queue.pop(0)
            if node in order:
                continue
            order.append(node)
            for target in self.definition.nodes[node].next:
                pending = waiting.get(target)
                back = self.definition.topology.is_back_edge(node, target)
                if pending is None or target in order or back:
                    continue
                pending.discard(node)
                if not pending:
                    queue.append(target)
        # Last: nodes no forward edge leads to, placed after the nodes that lead to them.
        return order + [n for n in self.definition.nodes if n not in order]

    def _handler_column(self, node_id: str) -> int:
        """A node no forward edge leads to (an on_error handler, a node only back edges reach):
        right of the nodes that lead to it."""
        sources = [
            self.column[n.id] + 1
            for n in self.definition.nodes.values()
            if (n.on_error == node_id or node_id in n.next) and n.id in self.column
        ]
        return max(sources, default=0)

    def box(self, node_id: str) -> tuple[float, float]:
        """The top-left corner of the node's box."""
        column = self.column[node_id]
        row = self.rows[column].index(node_id)
        # Shorter columns are centred against the tallest one.
        offset = (self.height - len(self.rows[column])) * (NODE_HEIGHT + ROW_GAP) / 2
        x = MARGIN + column * (NODE_WIDTH + COLUMN_GAP)
        y = MARGIN + offset + row * (NODE_HEIGHT + ROW_GAP)
        return x, y


class _Drawing:
    def __init__(
        self,
        definition: GraphDefinition,
        layout: _Layout,
        activity: dict[str, NodeActivity] | None,
    ) -> None:
        self.definition = definition
        self.layout = layout
        self.activity = activity
        self.has_loops = any(
            definition.topology.is_back_edge(node.id, target)
            for node in definition.nodes.values()
            for target in node.next
        )

    def svg(self, title: str, *, legend: bool, max_width: int | None) -> SafeString:
        width = (
            2 * MARGIN + self.layout.columns * NODE_WIDTH + (self.layout.columns - 1) * COLUMN_GAP
        )
        height = 2 * MARGIN + self.layout.height * NODE_HEIGHT + (self.layout.height - 1) * ROW_GAP
        height += LOOP_DEPTH if self.has_loops else 0
        legend_top = height
        height += LEGEND_HEIGHT if legend else 0
        style = f' style="max-width: {max_width}px; height: auto"' if max_width else ""
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="pikku-graph" role="img" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}"'
            f'{style} font-family="sans-serif" font-size="12">',
            f"<title>{escape(title or 'Graph')}</title>",
            '<defs><marker id="pikku-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
            'markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" '
            'orient="auto-start-reverse">'
            '<path d="M0,0 L10,5 L0,10 z" fill="#4a5568"/></marker></defs>',
            *self._edges(),
            *self._nodes(),
        ]
        if legend:
            parts.append(self._legend(legend_top))
        parts.append("</svg>")
        return mark_safe("".join(parts))  # every text inside went through escape()

    # --- edges ------------------------------------------------------------------------------

    def _edges(self) -> list[str]:
        drawn: list[str] = []
        for node in self.definition.nodes.values():
            labels = _branch_labels(node.branches)
            for target in node.next:
                branch = labels.get(target)
                drawn.append(self._edge(node.id, target, branch))
            if node.on_error is not None:
                drawn.append(self._error_edge(node.id, node.on_error))
        return drawn

    def _edge(self, source: str, target: str, branches: list[str] | None) -> str:
        taken = self._taken(source, target, branches)
        colour, stroke = (EDGE_TAKEN, 2.6) if taken else (EDGE, 1.3)
        back = self.definition.topology.is_back_edge(source, target)
        path, label_at = (self._loop_path if back else self._forward_path)(source, target)
        dash = ' stroke-dasharray="5 3"' if back else ""
        classes = (
            "pikku-edge"
            + (" pikku-edge-taken" if taken else "")
            + (" pikku-edge-back" if back else "")
        )
        parts = [
            f'<path class="{classes}" d="{path}" fill="none" stroke="{colour}" '
            f'stroke-width="{stroke}"{dash} marker-end="url(#pikku-arrow)"/>'
        ]
        if branches:
            x, y = label_at
            weight = "bold" if taken else "normal"
            parts.append(
                f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="middle" font-size="11" '
                f'font-weight="{weight}" fill="{colour}" paint-order="stroke" stroke="#fff" '
                f'stroke-width="3">{escape(" | ".join(branches))}</text>'
            )
        return "".join(parts)

    def _error_edge(self, source: str, handler: str) -> str:
        taken = self.activity is not None and any(
            handled_key(key) is not None and _node_of(self.definition, key) == handler
            for key, _ in self._instances(handler)
        )
        path, (x, y) = self._forward_path(source, handler)
        stroke = 2.4 if taken else 1.2
        return (
            f'<path class="pikku-edge pikku-edge-error" d="{path}" fill="none" stroke="{ERROR_EDGE}" '
            f'stroke-width="{stroke}" stroke-dasharray="2 3" marker-end="url(#pikku-arrow)"/>'
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="middle" font-size="10" fill="{ERROR_EDGE}" '
            f'paint-order="stroke" stroke="#fff" stroke-width="3">on error</text>'
        )

    def _taken(self, source: str, target: str, branches: list[str] | None) -> bool:
        if self.activity is None:
            return False
        done = self.activity.get(source)
        if done is None or not done.succeeded:
            return False
        if branches is not None:
            return bool(done.branches & set(branches))
        return bool(self._instances(target))

    def _instances(self, node_id: str) -> list[tuple[str, str]]:
        found = (self.activity or {}).get(node_id)
        return found.instances if found is not None else []

    def _forward_path(self, source: str, target: str) -> tuple[str, tuple[float, float]]:
        sx, sy = self.layout.box(source)
        tx, ty = self.layout.box(target)
        x1, y1 = sx + NODE_WIDTH, sy + NODE_HEIGHT / 2
        x2, y2 = tx - 2, ty + NODE_HEIGHT / 2
        bend = max((x2 - x1) / 2, 24)
        path = f"M{x1:.1f},{y1:.1f} C{x1 + bend:.1f},{y1:.1f} {x2 - bend:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        return path, ((x1 + x2) / 2, (y1 + y2) / 2 - 4)

    def _loop_path(self, source: str, target: str) -> tuple[str, tuple[float, float]]:
        sx, sy = self.layout.box(source)
        tx, ty = self.layout.box(target)
        bottom = MARGIN + self.layout.height * (NODE_HEIGHT + ROW_GAP) - ROW_GAP + LOOP_DEPTH - 10
        x1, y1 = sx + NODE_WIDTH * 0.65, sy + NODE_HEIGHT
        x2, y2 = tx + NODE_WIDTH * 0.35, ty + NODE_HEIGHT + 2
        if source == target:
            x1, x2 = sx + NODE_WIDTH * 0.7, sx + NODE_WIDTH * 0.3
        path = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{bottom:.1f} {x2:.1f},{bottom:.1f} {x2:.1f},{y2:.1f}"
        return path, ((x1 + x2) / 2, bottom - 8)

    # --- nodes ------------------------------------------------------------------------------

    def _nodes(self) -> list[str]:
        return [self._node(node_id) for node_id in self.definition.nodes]

    def _node(self, node_id: str) -> str:
        node = self.definition.nodes[node_id]
        x, y = self.layout.box(node_id)
        done = (self.activity or {}).get(node_id)
        status = done.status if done is not None else None
        fill = (
            STATUS_FILL.get(status or "", NOT_RUN_FILL)
            if self.activity is not None
            else NOT_RUN_FILL
        )
        ink = "#ffffff" if fill != NOT_RUN_FILL else "#1a202c"
        quiet = "#e2e8f0" if fill != NOT_RUN_FILL else "#4a5568"
        what = node.function or "approval"
        if node.for_each is not None:
            what = f"{what} · for each" + (" (one by one)" if node.mode == "sequential" else "")
        entry = node_id in self.definition.entry
        stroke = "#2d3748" if entry else "#a0aec0"
        tooltip = self._tooltip(node_id, what, done)
        badge = self._badge(x, y, done)
        return (
            f'<g class="pikku-node pikku-node-{escape(status or "not-run")}" data-node="{escape(node_id)}">'
            f"<title>{escape(tooltip)}</title>"
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="7" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{2 if entry else 1}"/>'
            f'<text x="{x + 10:.1f}" y="{y + 20:.1f}" font-weight="bold" fill="{ink}">'
            f"{escape(_clip(node_id, 20))}</text>"
            f'<text x="{x + 10:.1f}" y="{y + 37:.1f}" font-size="10.5" fill="{quiet}">'
            f"{escape(_clip(what, 26))}</text>"
            f"{badge}</g>"
        )

    def _badge(self, x: float, y: float, done: NodeActivity | None) -> str:
        """`N visits` for a node visited more than once; `k/n` items succeeded for a for_each
        node."""
        if done is None:
            return ""
        count = len(done.instances)
        if done.items:
            text = f"{done.succeeded}/{count}"
        elif count > 1:
            text = f"{count} visits"
        else:
            return ""
        width = 8 + 6.5 * len(text)
        bx = x + NODE_WIDTH - width - 4
        return (
            f'<g class="pikku-node-count"><rect x="{bx:.1f}" y="{y + 5:.1f}" width="{width}" height="16" '
            f'rx="8" fill="#ffffff" fill-opacity="0.9"/>'
            f'<text x="{bx + width / 2:.1f}" y="{y + 17:.1f}" text-anchor="middle" font-size="11" '
            f'font-weight="bold" fill="#1a202c">{escape(text)}</text></g>'
        )

    def _tooltip(self, node_id: str, what: str, done: NodeActivity | None) -> str:
        lines = [f"{node_id}: {what}"]
        if done is not None:
            lines += [f"{key}: {status}" for key, status in done.instances]
            if done.branches:
                lines.append("branch taken: " + ", ".join(sorted(done.branches)))
        elif self.activity is not None:
            lines.append("not run")
        return "\n".join(lines)

    def _legend(self, top: float) -> str:
        entries = [("not run", NOT_RUN_FILL), *((s.value, STATUS_FILL[s]) for s in StepStatus)]
        parts = []
        x = MARGIN
        for label, colour in entries:
            parts.append(
                f'<rect x="{x}" y="{top + 6}" width="12" height="12" rx="3" fill="{colour}" '
                f'stroke="#a0aec0"/><text x="{x + 16}" y="{top + 16}" font-size="11" '
                f'fill="#4a5568">{escape(label)}</text>'
            )
            x += 30 + 7 * len(label)
        return f'<g class="pikku-graph-legend">{"".join(parts)}</g>'


def _branch_labels(branches: dict[str, tuple[str, ...]] | None) -> dict[str, list[str]]:
    """The branch names that lead to each target (several may lead to one)."""
    labels: dict[str, list[str]] = {}
    for branch, targets in (branches or {}).items():
        for target in targets:
            labels.setdefault(target, []).append(branch)
    return labels


def _clip(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"
