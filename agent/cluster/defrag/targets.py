"""The defrag target set: nodes inside the target window, fullest first, kept sorted as the
plan changes their usage, and the first one a pod fits (``find``)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from agent.cluster.defrag.args import DefragArgs
from agent.cluster.engine import slack
from agent.cluster.placement import NodeState, why_not
from agent.model.objects import Pod


class Targets:
    """The target set, fullest first (then name), kept sorted as utilizations change.

    Keys live in consecutive blocks that each know the largest headroom (protection limit
    minus used, of the resource) among their nodes, so a pod skips whole blocks of full
    nodes: a plan over thousands of targets does not test every node for every pod.
    """

    BLOCK = 48

    def __init__(self, states: Iterable[NodeState], args: DefragArgs) -> None:
        self.args = args
        self.resource = args.resource_type
        self.states: dict[str, NodeState] = {}
        self.limit: dict[str, float] = {}
        #: Headroom of each filed node as of its last filing (update() keeps it current).
        self.head: dict[str, float] = {}
        keys: list[tuple[float, str]] = []
        for state in states:
            total = state.allocatable(self.resource)
            self.states[state.name] = state
            # The protection limit with the float slack of the per-node check folded in.
            self.limit[state.name] = total * args.protection_threshold / 100.0 + slack(total)
            key = self.key_of(state)
            if key is not None:
                keys.append(key)
                self.head[state.name] = self._headroom(state.name)
        keys.sort()
        size = self.BLOCK
        self.blocks: list[list[tuple[float, str]]] = [
            keys[i : i + size] for i in range(0, len(keys), size)
        ]
        self.firsts = [b[0] for b in self.blocks]
        self.maxes = [self._max(b) for b in self.blocks]

    def __len__(self) -> int:
        return sum(len(b) for b in self.blocks)

    def names(self) -> list[str]:
        return [name for block in self.blocks for _, name in block]

    def key_of(self, state: NodeState) -> tuple[float, str] | None:
        util = state.utilization(self.resource)
        inside = self.args.defragment_threshold < util < self.args.protection_threshold
        return (-util, state.name) if inside else None

    def _headroom(self, name: str) -> float:
        return self.limit[name] - self.states[name].used.get(self.resource, 0.0)

    def _max(self, block: list[tuple[float, str]]) -> float:
        head = self.head
        return max([head[name] for _, name in block])

    def _block_of(self, key: tuple[float, str]) -> int:
        return max(0, bisect.bisect_right(self.firsts, key) - 1)

    def _remove(self, key: tuple[float, str]) -> None:
        if not self.blocks:
            return
        i = self._block_of(key)
        block = self.blocks[i]
        j = bisect.bisect_left(block, key)
        if j == len(block) or block[j] != key:
            return
        del block[j]
        room = self.head.pop(key[1])
        if block:
            self.firsts[i] = block[0]
            if room >= self.maxes[i]:
                self.maxes[i] = self._max(block)
        else:
            del self.blocks[i], self.firsts[i], self.maxes[i]

    def _add(self, key: tuple[float, str]) -> None:
        room = self.head[key[1]] = self._headroom(key[1])
        if not self.blocks:
            self.blocks, self.firsts, self.maxes = [[key]], [key], [room]
            return
        i = self._block_of(key)
        block = self.blocks[i]
        bisect.insort(block, key)
        if len(block) > 2 * self.BLOCK:
            half = len(block) // 2
            self.blocks[i : i + 1] = [block[:half], block[half:]]
            self.firsts[i : i + 1] = [block[0], block[half]]
            self.maxes[i : i + 1] = [self._max(block[:half]), self._max(block[half:])]
        else:
            self.firsts[i] = block[0]
            self.maxes[i] = max(self.maxes[i], room)

    def update(self, state: NodeState, old_key: tuple[float, str] | None) -> None:
        """Re-file a node whose usage changed (``old_key`` = its key before)."""
        if old_key is not None:
            self._remove(old_key)
        key = self.key_of(state)
        if key is not None:
            self._add(key)

    def find(self, pod: Pod) -> NodeState | None:
        """The first target, in order, that passes every placement check."""
        need = pod.request(self.resource)
        threshold = (self.resource, self.args.protection_threshold)
        head = self.head
        for block, best in zip(self.blocks, self.maxes, strict=True):
            if need > best:
                continue
            for _, name in block:
                if need > head[name]:  # necessary; reservations only add to it
                    continue
                state = self.states[name]
                if why_not(pod, state, threshold) is None:
                    return state
        return None
