"""Small made-up files in the exact schemas of GPQA, MMLU-Pro and GraphWiz, to try the out-of-domain
evaluation offline (none of the real datasets is shipped; GPQA's authors ask that it not be).

    python -m tests.ood_samples DIR
    python -m quadrants.evaluate tiny eval=paper_ood eval.limit=2 eval.data_dir=DIR

Two questions per GPQA domain and per MMLU-Pro category, two problems per GraphWiz task; the
questions are ours, not the datasets', and every reference answer is right.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["GPQA_ROWS", "GRAPHWIZ_ROWS", "MMLU_PRO_ROWS", "write_ood_samples"]

_GPQA_COLUMNS = (
    "Pre-Revision Question",
    "Pre-Revision Correct Answer",
    "Question",
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
    "Explanation",
    "Record ID",
    "High-level domain",
    "Subdomain",
)


def _gpqa(record: str, domain: str, question: str, correct: str, *wrong: str) -> dict[str, str]:
    return {
        "Pre-Revision Question": question,
        "Pre-Revision Correct Answer": correct,
        "Question": question,
        "Correct Answer": correct,
        "Incorrect Answer 1": wrong[0],
        "Incorrect Answer 2": wrong[1],
        "Incorrect Answer 3": wrong[2],
        "Explanation": "",
        "Record ID": record,
        "High-level domain": domain,
        "Subdomain": domain,
    }


GPQA_ROWS: list[dict[str, str]] = [
    _gpqa(
        "recSample01",
        "Physics",
        "What is the SI unit of force?",
        "newton",
        "joule",
        "watt",
        "pascal",
    ),
    _gpqa(
        "recSample02",
        "Physics",
        "How many spatial dimensions does a cube have?",
        "3",
        "1",
        "2",
        "4",
    ),
    _gpqa(
        "recSample03", "Chemistry", "What is the chemical symbol of sodium?", "Na", "So", "Sd", "S"
    ),
    _gpqa("recSample04", "Chemistry", "How many protons has a carbon atom?", "6", "4", "8", "12"),
    _gpqa(
        "recSample05",
        "Biology",
        "Which molecule carries genetic information in humans?",
        "DNA",
        "ATP",
        "glucose",
        "collagen",
    ),
    _gpqa("recSample06", "Biology", "How many chambers has the human heart?", "4", "2", "3", "5"),
]

MMLU_PRO_ROWS: list[dict[str, Any]] = [
    {
        "question_id": 70001,
        "question": "What is 2 + 3?",
        "options": [str(n) for n in range(1, 11)],
        "answer": "E",
        "answer_index": 4,
        "cot_content": "",
        "category": "math",
        "src": "sample",
    },
    {
        "question_id": 70002,
        "question": "What is 9 - 7?",
        "options": [str(n) for n in range(1, 11)],
        "answer": "B",
        "answer_index": 1,
        "cot_content": "",
        "category": "math",
        "src": "sample",
    },
    {
        "question_id": 70003,
        "question": "Which data structure is first-in, first-out?",
        "options": ["stack", "queue", "heap", "tree"],
        "answer": "B",
        "answer_index": 1,
        "cot_content": "",
        "category": "computer science",
        "src": "sample",
    },
    {
        "question_id": 70004,
        "question": "How many bits are in a byte?",
        "options": ["2", "4", "8", "16", "32", "64", "10", "12", "6", "7"],
        "answer": "C",
        "answer_index": 2,
        "cot_content": "",
        "category": "computer science",
        "src": "sample",
    },
    {
        "question_id": 70005,
        "question": "Which city is the capital of France?",
        "options": [
            "Rome",
            "Madrid",
            "Berlin",
            "Paris",
            "Lisbon",
            "Vienna",
            "Athens",
            "Bern",
            "Oslo",
            "Prague",
        ],
        "answer": "D",
        "answer_index": 3,
        "cot_content": "",
        "category": "history",
        "src": "sample",
    },
    {
        "question_id": 70006,
        "question": "In which century did the year 1901 fall?",
        "options": ["18th", "19th", "20th", "21st", "17th", "16th", "15th", "14th", "13th", "12th"],
        "answer": "C",
        "answer_index": 2,
        "cot_content": "",
        "category": "history",
        "src": "sample",
    },
]

_UNDIRECTED = (
    "In an undirected graph, (i,j) means that node i and node j are connected "
    "with an undirected edge."
)
_DIRECTED = (
    "In a directed graph, (i->j) means that node i and node j are connected with a directed "
    "edge from node i to node j."
)


def _graph(task_text: str, rule: str, ask: str, nodes: int, edges: str, question: str) -> str:
    return (
        f"{task_text} {rule} {ask} Q: The nodes are numbered from 0 to {nodes - 1}, and the "
        f"edges are: {edges}. {question}"
    )


_CYCLE = (
    "Determine whether or not there is a cycle in an undirected graph.",
    _UNDIRECTED,
    "Given a graph, you need to output Yes or No, indicating whether there "
    "is a cycle in the graph.",
)
_CONNECT = (
    "Determine whether two nodes are connected in an undirected graph.",
    _UNDIRECTED,
    "Given a graph and a pair of nodes, you need to output Yes or No, indicating whether the "
    "node i and node j are connected.",
)
_BIPARTITE = (
    "Determine whether or not a graph is bipartite.",
    _DIRECTED,
    "Given a graph, you need to output Yes or No, indicating whether the graph is bipartite.",
)
_TOPOLOGY = (
    "Find one of the topology sorting paths of the given graph.",
    _DIRECTED,
    "Given a graph, you need to output one of the topology sorting paths of the graph.",
)
_SHORTEST = (
    "Find the shortest path between two nodes in an undirected graph.",
    "In an undirected graph, (i,j,k) means that node i and node j are connected with an "
    "undirected edge with weight k.",
    "Given a graph and a pair of nodes, you need to output the shortest path between "
    "the two nodes.",
)
_FLOW = (
    "Find the maximum flow between two nodes in a directed graph.",
    "In a directed graph, (i->j,k) means that node i and node j are connected with an directed "
    "edge from node i to node j with weight k.",
    "Given a graph and a pair of nodes, you need to output the maximum flow between the two nodes.",
)
_HAMILTON = (
    "Determine whether or not there is a Hamiltonian path in an undirected graph.",
    _UNDIRECTED,
    "Given a graph, you need to output Yes or No, indicating whether there is a "
    "Hamiltonian path in the graph.",
)


def _triangle(weights: str, edges: str, nodes: int) -> str:
    return (
        "Find the maximum sum of the weights of three interconnected nodes. In an undirected "
        "graph, [i, k] means that node i has the weight k. (i,j) means that node i and node j "
        "are connected with an undirected edge. Given a graph, you need to output the maximum "
        "sum of the weights of three interconnected nodes. Q: The nodes are numbered from 0 to "
        f"{nodes - 1}, weights of nodes are: {weights}, and the edges are: {edges}. What is the "
        "maximum sum of the weights of three nodes?"
    )


def _substructure(g_edges: str, sub_edges: str) -> str:
    return (
        "Determine if a smaller graph is present as an exact match within a larger graph. "
        + _DIRECTED
        + " Given a graph G and a subgraph G', you need to output Yes or No, indicating whether "
        "subgraph G' is present within the directed graph G. Q: The nodes of graph G are "
        f"numbered from 0 to 3, and the edges are: {g_edges}. The nodes of subgraph G' are "
        f"numbered from a to c, and the edges are: {sub_edges}. Is subgraph G' present within "
        "graph G as a direct substructure?"
    )


GRAPHWIZ_ROWS: dict[str, list[tuple[str, str]]] = {
    "cycle": [
        (_graph(*_CYCLE, 3, "(0, 1) (1, 2) (0, 2)", "Is there a cycle in this graph?"), "### Yes"),
        (_graph(*_CYCLE, 4, "(0, 1) (1, 2) (2, 3)", "Is there a cycle in this graph?"), "### No"),
    ],
    "connectivity": [
        (
            _graph(*_CONNECT, 4, "(0, 1) (2, 3)", "Is there a path between node 0 and node 1?"),
            "### Yes",
        ),
        (
            _graph(*_CONNECT, 4, "(0, 1) (2, 3)", "Is there a path between node 0 and node 3?"),
            "### No",
        ),
    ],
    "bipartite": [
        (_graph(*_BIPARTITE, 4, "(0->1) (1->2) (2->3)", "Is this graph bipartite?"), "### Yes"),
        (_graph(*_BIPARTITE, 3, "(0->1) (1->2) (0->2)", "Is this graph bipartite?"), "### No"),
    ],
    # 0->1, 0->2, 1->3, 2->3: 0 first, 3 last, 1 and 2 in either order
    "topology": [
        (
            _graph(
                *_TOPOLOGY,
                4,
                "(0->1) (0->2) (1->3) (2->3)",
                "Give one topology sorting path of this graph.",
            ),
            "### [[0, 1, 2, 3], [0, 2, 1, 3]]",
        ),
        (
            _graph(*_TOPOLOGY, 3, "(2->1) (1->0)", "Give one topology sorting path of this graph."),
            "### [[2, 1, 0]]",
        ),
    ],
    # 0-1 (1), 1-2 (2), 0-2 (5): 0 to 2 costs 3 via 1; 2-3 (4): 0 to 3 costs 7
    "shortest": [
        (
            _graph(
                *_SHORTEST,
                4,
                "(0,1,1) (1,2,2) (0,2,5) (2,3,4)",
                "Give the weight of the shortest path from node 0 to node 2.",
            ),
            "### 3",
        ),
        (
            _graph(
                *_SHORTEST,
                4,
                "(0,1,1) (1,2,2) (0,2,5) (2,3,4)",
                "Give the weight of the shortest path from node 0 to node 3.",
            ),
            "### 7",
        ),
    ],
    # triangle 0-1-2 weighs 1 + 2 + 3 = 6; triangle 1-2-3 weighs 2 + 3 + 9 = 14
    "triangle": [
        (_triangle("[0, 1] [1, 2] [2, 3]", "(0, 1) (1, 2) (0, 2)", 3), "### 6"),
        (
            _triangle("[0, 1] [1, 2] [2, 3] [3, 9]", "(0, 1) (1, 2) (0, 2) (1, 3) (2, 3)", 4),
            "### 14",
        ),
    ],
    # 0->1 (3), 1->2 (2), 0->2 (1): 2 through 1 plus 1 direct = 3
    "flow": [
        (
            _graph(
                *_FLOW,
                3,
                "(0->1,3) (1->2,2) (0->2,1)",
                "What is the maximum flow from node 0 to node 2?",
            ),
            "### 3",
        ),
        (
            _graph(
                *_FLOW,
                3,
                "(0->1,3) (1->2,2) (0->2,1)",
                "What is the maximum flow from node 1 to node 2?",
            ),
            "### 2",
        ),
    ],
    "hamilton": [
        (
            _graph(
                *_HAMILTON, 4, "(0, 1) (1, 2) (2, 3)", "Is there a Hamiltonian path in this graph?"
            ),
            "### Yes",
        ),
        (
            _graph(
                *_HAMILTON, 4, "(0, 1) (0, 2) (0, 3)", "Is there a Hamiltonian path in this graph?"
            ),
            "### No",
        ),
    ],
    "substructure": [
        (_substructure("(0->1) (1->2) (2->3)", "(a->b) (b->c)"), "### Yes"),
        (_substructure("(0->1) (0->2) (0->3)", "(a->b) (b->c)"), "### No"),
    ],
}
"""task -> [(input_prompt, answer)], in the GraphWiz test set's wording."""


def write_ood_samples(directory: str | Path) -> list[Path]:
    """Write gpqa/gpqa_diamond.csv, mmlu_pro/test.jsonl and
    graphwiz/<task>.jsonl under `directory`."""
    root = Path(directory)
    written = []
    (root / "gpqa").mkdir(parents=True, exist_ok=True)
    with (root / "gpqa" / "gpqa_diamond.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=_GPQA_COLUMNS)
        writer.writeheader()
        writer.writerows(GPQA_ROWS)
    written.append(root / "gpqa" / "gpqa_diamond.csv")
    (root / "mmlu_pro").mkdir(exist_ok=True)
    (root / "mmlu_pro" / "test.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in MMLU_PRO_ROWS)
    )
    written.append(root / "mmlu_pro" / "test.jsonl")
    (root / "graphwiz").mkdir(exist_ok=True)
    for task, rows in GRAPHWIZ_ROWS.items():
        lines = [
            json.dumps(
                {
                    "index": i,
                    "input_prompt": prompt,
                    "answer": answer,
                    "node_range": [2, 5],
                    "edge_range": [0, 10],
                }
            )
            for i, (prompt, answer) in enumerate(rows)
        ]
        (root / "graphwiz" / f"{task}.jsonl").write_text("\n".join(lines) + "\n")
        written.append(root / "graphwiz" / f"{task}.jsonl")
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.ood_samples DIR")
    for path in write_ood_samples(sys.argv[1]):
        print(path)
