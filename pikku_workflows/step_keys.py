"""The characters the engine reserves in step keys for its own: `name#N` (ordinals, graph
revisits), `<key>:onError`, `node[i]` (graph for_each items). User keys and node ids avoid them."""

from __future__ import annotations

import re

RESERVED_KEY_CHARACTERS = re.compile(r"[#:\[\]]")
