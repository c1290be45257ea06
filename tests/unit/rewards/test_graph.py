"""GraphWiz answers graded by hand, one rule per reference format; orders and paths checked on the
graph of the prompt; garbage never raises and stays fast."""

from __future__ import annotations

import time

import pytest

from quadrants.rewards.graph import (
    Graph,
    graph_rule,
    is_topological_order,
    parse_graph,
    path_weight,
)
from quadrants.rewards.outcome import Outcome
from quadrants.rewards.rules import final_answer_text

CYCLE = (
    "Determine whether or not there is a cycle in an undirected graph. In an undirected graph, (i,j) means "
    "that node i and node j are connected with an undirected edge. Given a graph, you need to output Yes or "
    "No, indicating whether there is a cycle in the graph. Q: The nodes are numbered from 0 to 2, and the "
    "edges are: (0, 1) (1, 2) (0, 2). Is there a cycle in this graph?"
)
# 0->1, 0->2, 1->3, 2->3: valid orders are 0 1 2 3 and 0 2 1 3
TOPOLOGY = (
    "Find one of the topology sorting paths of the given graph. In a directed graph, (i->j) means that "
    "node i and node j are connected with a directed edge from node i to node j. Given a graph, you need "
    "to output one of the topology sorting paths of the graph. Q: The nodes are numbered from 0 to 3, and "
    "the edges are: (0->1) (0->2) (1->3) (2->3). Give one topology sorting path of this graph."
)
# 0-1 (1), 1-2 (2), 0-2 (5), 2-3 (4): the shortest 0 -> 3 is 0 1 2 3, weight 7
SHORTEST = (
    "Find the shortest path between two nodes in an undirected graph. In an undirected graph, (i,j,k) "
    "means that node i and node j are connected with an undirected edge with weight k. Q: The nodes are "
    "numbered from 0 to 3, and the edges are: (0,1,1) (1,2,2) (0,2,5) (2,3,4). Give the weight of the "
    "shortest path from node 0 to node 3."
)
HAMILTON = (
    "Determine whether or not there is a Hamiltonian path in an undirected graph. Q: The nodes are "
    "numbered from 0 to 3, and the edges are: (0, 1) (1, 2) (2, 3) (0, 3). Is there a Hamiltonian path?"
)


def test_prompt_graphs_are_read():
    assert parse_graph(CYCLE) == Graph(
        nodes=3, edges=((0, 1, None), (1, 2, None), (0, 2, None)), directed=False
    )
    topology = parse_graph(TOPOLOGY)
    assert topology.directed and topology.nodes == 4 and len(topology.edges) == 4
    shortest = parse_graph(SHORTEST)
    assert (shortest.source, shortest.target) == (0, 3) and shortest.edges[2] == (0, 2, 5.0)
    flow = parse_graph(
        "Q: The nodes are numbered from 0 to 2, and the edges are: (0->1,3) (1->2,2). "
        "What is the maximum flow from node 0 to node 2?"
    )
    assert flow.edges == ((0, 1, 3.0), (1, 2, 2.0)) and flow.directed
    assert parse_graph("no graph here") is None


def test_orders_and_paths_on_a_graph():
    topology = parse_graph(TOPOLOGY)
    assert is_topological_order([0, 2, 1, 3], topology) and is_topological_order(
        [0, 1, 2, 3], topology
    )
    assert not is_topological_order([1, 0, 2, 3], topology)  # edge 0->1 broken
    assert not is_topological_order([0, 1, 3], topology)  # node 2 missing
    assert not is_topological_order([0, 1, 2, 3, 3], topology)
    shortest = parse_graph(SHORTEST)
    assert path_weight([0, 1, 2, 3], shortest) == 7.0  # 1 + 2 + 4
    assert path_weight([3, 2, 0], shortest) == 9.0  # undirected: both ways, 4 + 5
    assert path_weight([0, 3], shortest) is None  # no edge 0-3
    assert path_weight([1, 0], topology) is None  # directed: 1->0 is no edge


@pytest.mark.parametrize(
    ("reference", "question", "completion", "outcome"),
    [
        # yes / no
        ("### Yes", CYCLE, "0-1-2-0 closes a loop. \\boxed{Yes}", Outcome.correct),
        ("### Yes", CYCLE, "### Yes, there is a cycle.", Outcome.correct),
        ("### Yes", CYCLE, "So the answer is yes.", Outcome.correct),
        ("### Yes", CYCLE, "\\boxed{\\text{No}}", Outcome.wrong),
        ("### No", CYCLE, "\\boxed{no}", Outcome.correct),
        (
            "### Yes",
            CYCLE,
            "There might be a cycle, maybe.",
            Outcome.no_answer,
        ),  # no final-answer marker
        ("### Yes", CYCLE, "\\boxed{3}", Outcome.no_answer),  # a box, but no yes/no in it
        # numbers
        ("### 7", SHORTEST, "0 -> 1 -> 2 -> 3 costs 1 + 2 + 4, \\boxed{7}", Outcome.correct),
        ("### 7", SHORTEST, "### 7.0", Outcome.correct),
        ("### 7", SHORTEST, "The answer is 9.", Outcome.wrong),
        ("### 7", SHORTEST, "\\boxed{seven}", Outcome.no_answer),
        # topological orders: any valid one, listed in the reference or not
        (
            "### [[0, 1, 2, 3]]",
            TOPOLOGY,
            "\\boxed{[0, 2, 1, 3]}",
            Outcome.correct,
        ),  # valid, not listed
        ("### [[0, 1, 2, 3]]", TOPOLOGY, "### 0 -> 1 -> 2 -> 3", Outcome.correct),
        ("### [[0, 1, 2, 3]]", TOPOLOGY, "\\boxed{[1, 0, 2, 3]}", Outcome.wrong),  # 0->1 broken
        ("### [[0, 1, 2, 3]]", TOPOLOGY, "\\boxed{[0, 1, 2]}", Outcome.wrong),  # a node missing
        ("### [[0, 1, 2, 3]]", TOPOLOGY, "\\boxed{none}", Outcome.no_answer),
        # a path reference: any path from 0 to 3 of the same total weight
        ("### [0, 1, 2, 3]", SHORTEST, "\\boxed{[0, 1, 2, 3]}", Outcome.correct),
        ("### [0, 1, 2, 3]", SHORTEST, "\\boxed{[0, 2, 3]}", Outcome.wrong),  # weight 9, not 7
        ("### [0, 1, 2, 3]", SHORTEST, "\\boxed{[0, 3]}", Outcome.wrong),  # no such edge
        ("### [0, 1, 2, 3]", SHORTEST, "\\boxed{[1, 2, 3]}", Outcome.wrong),  # not from node 0
        # a Hamilton path reference: every node once along edges (the cycle 0-1-2-3-0 has several)
        ("### 0,1,2,3", HAMILTON, "\\boxed{1, 0, 3, 2}", Outcome.correct),
        ("### 0,1,2,3", HAMILTON, "\\boxed{0, 2, 1, 3}", Outcome.wrong),  # 0-2 is no edge
    ],
)
def test_rules_grade_by_hand(reference, question, completion, outcome):
    assert graph_rule("task", reference, question).grade(completion) is outcome


def test_rule_kind_and_chance_follow_the_reference_format():
    assert [
        graph_rule("t", ref, q).kind
        for ref, q in [
            ("### Yes", CYCLE),
            ("### 7", SHORTEST),
            ("### [[0, 1, 2, 3]]", TOPOLOGY),
            ("### [0, 1, 2, 3]", SHORTEST),
        ]
    ] == ["yes_no", "number", "orders", "path"]
    assert (
        graph_rule("cycle", "### No", CYCLE).chance == 0.5
        and graph_rule("t", "### 7", SHORTEST).chance == 0.0
    )
    assert graph_rule("cycle", "### No", CYCLE).describe() == {
        "rule": "graph",
        "task": "cycle",
        "kind": "yes_no",
        "reference": "no",
    }


@pytest.mark.parametrize(
    ("reference", "question", "message"),
    [
        ("### maybe", CYCLE, "is not yes/no, a number or node lists"),
        ("### [[1, 0, 2, 3]]", TOPOLOGY, "reference order .* is not valid on the prompt's graph"),
        ("### [0, 3]", SHORTEST, "reference path .* is not valid"),
        ("### [[0, 1]]", "Find an order. There is no node range here.", "no graph"),
    ],
)
def test_unreadable_references_fail_at_load_naming_the_row(reference, question, message):
    with pytest.raises(ValueError, match=message):
        graph_rule("task", reference, question)


def test_final_answer_text_prefers_box_then_hashes_then_answer_is():
    assert final_answer_text("### 3 \\boxed{4}") == "4"
    assert final_answer_text("answer is 5\n### 6\nmore") == "6"
    assert final_answer_text("The answer is 3.5. Done.") == "3.5"
    assert final_answer_text("nothing") is None and final_answer_text(None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "completion",
    [
        "### " + "1, " * 50_000,
        "\\boxed{" + "[" * 30_000,
        "answer " * 30_000,
        "yes no " * 30_000,
        "\x00\ud800###",
    ],
)
def test_garbage_is_graded_quickly_and_never_raises(completion):
    for rule in (
        graph_rule("t", "### [[0, 1, 2, 3]]", TOPOLOGY),
        graph_rule("t", "### 7", SHORTEST),
        graph_rule("t", "### Yes", CYCLE),
        graph_rule("t", "### [0, 1, 2, 3]", SHORTEST),
    ):
        started = time.perf_counter()
        assert rule.grade(completion) in (Outcome.correct, Outcome.wrong, Outcome.no_answer)
        assert time.perf_counter() - started < 1.0
