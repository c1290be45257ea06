"""Graph-problem answers (the GraphWiz test set): one rule per reference-answer format.

A GraphWiz reference answer reads ``### <answer>``; its format decides the rule (`graph_rule`):

- ``Yes`` / ``No`` (cycle, connectivity, bipartite, Hamilton path, substructure): the first yes/no
  word of the completion's final answer must match; a guess is right half of the time.
- a number (shortest-path weight, maximum triangle weight, maximum flow): the first number of the
  final answer must equal it (to 1e-6 relative).
- a list of node orders, ``[[0, 1, 2, 3, 4], [0, 2, 1, 3, 4]]`` (topological sort): several orders
  are correct and the list may not hold them all, so the answered sequence is checked against the
  graph of the prompt: every node exactly once, and every edge i->j with i before j.
- one node sequence, ``[8, 4, 0, 11]``: a path answer, checked against the graph: every step an
  edge, from the queried source to the queried target with the reference's total weight (shortest
  path), or visiting every node once (Hamilton path).

The final answer is `rules.final_answer_text` (last box, else after ``###``, else after "answer
is"). Graphs are read from the prompt text (`parse_graph`): "The nodes are numbered from 0 to N",
edges ``(i,j)``, ``(i, j)``, ``(i->j)``, weighted ``(i,j,w)`` / ``(i->j,w)``, and "from node s to
node t".
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from quadrants.rewards.outcome import Outcome
from quadrants.rewards.rules import final_answer_text

__all__ = ["Graph", "GraphRule", "graph_rule", "is_topological_order", "parse_graph", "path_weight"]

MAX_NODES_IN_ANSWER = 10_000
"""Longest node sequence read from an answer (graphs in the test set have at most ~100 nodes)."""

_NODE_RANGE = re.compile(r"numbered from (\d+) to (\d+)")
_EDGE = re.compile(r"\((\d+) ?(->|,) ?(\d+)(?: ?, ?(\d+(?:\.\d+)?))?\)")
_QUERY = re.compile(r"from node (\d+) to node (\d+)")
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_INTEGER = re.compile(r"\d+")
_BLANKS = re.compile(r"\s+")


@dataclass(frozen=True)
class Graph:
    """The graph of a prompt.

    Attributes:
        nodes: node count; nodes are 0 .. nodes - 1.
        edges: (i, j, weight or None); for an undirected graph each edge once, as written.
        directed: edges written ``i->j``.
        source, target: the queried pair ("from node s to node t"), when the prompt names one.
    """

    nodes: int
    edges: tuple[tuple[int, int, float | None], ...]
    directed: bool
    source: int | None = None
    target: int | None = None

    def weights(self) -> dict[tuple[int, int], float]:
        """(i, j) -> the smallest weight of an edge from i to j
        (both ways when undirected); 1 unweighted."""
        table: dict[tuple[int, int], float] = {}
        for i, j, weight in self.edges:
            value = 1.0 if weight is None else weight
            pairs = [(i, j)] if self.directed else [(i, j), (j, i)]
            for pair in pairs:
                table[pair] = min(value, table.get(pair, math.inf))
        return table


def parse_graph(question: str) -> Graph | None:
    """The graph a GraphWiz prompt describes (see the module docstring); None
    without a node range."""
    text = _BLANKS.sub(" ", question)
    node_range = _NODE_RANGE.search(text)
    if node_range is None:
        return None
    edges, directed = [], False
    for match in _EDGE.finditer(text, node_range.end()):
        weight = float(match.group(4)) if match.group(4) is not None else None
        edges.append((int(match.group(1)), int(match.group(3)), weight))
        directed = directed or match.group(2) == "->"
    query = _QUERY.search(text, node_range.end())
    return Graph(
        nodes=int(node_range.group(2)) + 1,
        edges=tuple(edges),
        directed=directed,
        source=int(query.group(1)) if query else None,
        target=int(query.group(2)) if query else None,
    )


def is_topological_order(order: list[int], graph: Graph) -> bool:
    """Every node of `graph` exactly once, and every edge i->j with i before j."""
    if sorted(order) != list(range(graph.nodes)):
        return False
    position = {node: index for index, node in enumerate(order)}
    return all(position[i] < position[j] for i, j, _ in graph.edges)


def path_weight(path: list[int], graph: Graph) -> float | None:
    """Total weight of `path` along the graph's edges (1 per unweighted edge); None
    if a step is no edge."""
    weights = graph.weights()
    total = 0.0
    for step in zip(path, path[1:]):
        if step not in weights:
            return None
        total += weights[step]
    return total


def _is_hamilton_path(path: list[int], graph: Graph) -> bool:
    return sorted(path) == list(range(graph.nodes)) and path_weight(path, graph) is not None


def _integers(text: str) -> list[int]:
    values = []
    for match in _INTEGER.finditer(text):
        values.append(int(match.group()))
        if len(values) > MAX_NODES_IN_ANSWER:
            break
    return values


@dataclass(frozen=True)
class GraphRule:
    """Grade a GraphWiz completion by the rule its reference answer's format selects (`graph_rule`).

    Attributes:
        task: the GraphWiz task (cycle, topology, shortest, ...).
        kind: "yes_no", "number", "orders" (any valid topological order) or "path".
        reference: the reference answer without its ``###`` (normalised: "yes"/"no", a number).
        graph: the prompt's graph, for "orders" and "path".
    """

    task: str
    kind: str
    reference: str
    graph: Graph | None = None

    @property
    def chance(self) -> float:
        """Yes/no: 1/2. Numbers, orders and paths: 0 (unbounded answers; a random order of a
        small graph can be a valid topological order, which we do not count)."""
        return 0.5 if self.kind == "yes_no" else 0.0

    def grade(self, completion: str) -> Outcome:
        answer = final_answer_text(completion)
        if answer is None:
            return Outcome.no_answer
        if self.kind == "yes_no":
            word = _YES_NO.search(answer)
            if word is None:
                return Outcome.no_answer
            return Outcome.correct if word.group(1).lower() == self.reference else Outcome.wrong
        if self.kind == "number":
            number = _NUMBER.search(answer)
            if number is None:
                return Outcome.no_answer
            gold = float(self.reference)
            return (
                Outcome.correct
                if abs(float(number.group()) - gold) <= 1e-6 * max(1.0, abs(gold))
                else Outcome.wrong
            )
        nodes = _integers(answer)
        if not nodes:
            return Outcome.no_answer
        assert self.graph is not None  # graph_rule gives "orders" and "path" rules a graph
        return Outcome.correct if self._valid(nodes) else Outcome.wrong

    def _valid(self, nodes: list[int]) -> bool:
        graph = self.graph
        assert graph is not None
        if self.kind == "orders":
            return is_topological_order(nodes, graph)
        if self.task == "hamilton":
            return _is_hamilton_path(nodes, graph)
        if graph.source is not None and (nodes[0], nodes[-1]) != (graph.source, graph.target):
            return False
        weight = path_weight(nodes, graph)
        gold = path_weight(json.loads(self.reference), graph)
        return weight is not None and gold is not None and math.isclose(weight, gold, rel_tol=1e-9)

    def describe(self) -> dict[str, Any]:
        return {"rule": "graph", "task": self.task, "kind": self.kind, "reference": self.reference}


def graph_rule(task: str, reference: str, question: str) -> GraphRule:
    """The rule for one GraphWiz row, chosen by the format of its reference answer.

    Raises:
        ValueError: a reference format none of the rules reads, or an order / path reference that
            is not valid on the graph parsed from `question` (the prompt was misread).
    """
    answer = reference.strip().lstrip("#").strip()
    if _YES_NO.fullmatch(answer.rstrip(".")):
        return GraphRule(task, "yes_no", answer.rstrip(".").lower())
    if _NUMBER.fullmatch(answer):
        return GraphRule(task, "number", answer)
    sequences = _node_sequences(answer)
    if sequences is None:
        raise ValueError(
            f"graphwiz {task}: reference answer {reference[:80]!r} is not yes/no, "
            "a number or node lists"
        )
    graph = parse_graph(question)
    if graph is None or not graph.edges:
        raise ValueError(
            f"graphwiz {task}: no graph ('numbered from 0 to N' and edges) in the prompt"
        )
    if len(sequences) > 1 or answer.startswith("[["):
        if not all(is_topological_order(order, graph) for order in sequences):
            raise ValueError(
                f"graphwiz {task}: reference order {answer[:80]!r} is not valid "
                "on the prompt's graph"
            )
        return GraphRule(task, "orders", json.dumps(sequences), graph)
    rule = GraphRule(task, "path", json.dumps(sequences[0]), graph)
    if not rule._valid(sequences[0]):
        raise ValueError(
            f"graphwiz {task}: reference path {answer[:80]!r} is not valid on the prompt's graph"
        )
    return rule


def _node_sequences(answer: str) -> list[list[int]] | None:
    """``[[0,1],[1,0]]`` -> two sequences; ``[0, 3, 5]``, ``0,3,5`` or
    ``0->3->5`` -> one; else None."""
    try:
        value = json.loads(answer)
    except ValueError:
        value = None
    if isinstance(value, list) and value and all(isinstance(item, list) for item in value):
        if all(item and all(isinstance(n, int) for n in item) for item in value):
            return value
        return None
    if isinstance(value, list) and value and all(isinstance(n, int) for n in value):
        return [value]
    if re.fullmatch(r"\d+(?: ?(?:,|->) ?\d+)+", answer):
        return [[int(n) for n in _INTEGER.findall(answer)]]
    return None
