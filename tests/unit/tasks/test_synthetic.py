import itertools
import random

import pytest

from quadrants.tasks.base import Problem, Task
from quadrants.tasks.synthetic import (
    ArithmeticTask,
    final_answer,
    format_expression,
    parse_expression,
    solution_steps,
)


def test_reference_solution_of_a_hand_example():
    # 37+48 = 85, 85-19 = 66
    task = ArithmeticTask()
    problem = task.make_problem([37, 48, 19], ["+", "-"])
    assert problem == Problem(id="37+48-19", prompt="37+48-19=", answer="66")
    assert task.reference_solution(problem) == "37+48=85,85-19=66 \\boxed{66}"


def test_arithmetic_task_is_a_task():
    assert isinstance(ArithmeticTask(), Task)


def test_problems_follow_the_settings():
    task = ArithmeticTask(num_terms=4, digits=2, operators="+")
    for problem in task.train_batch(50, random.Random(0)):
        terms, ops = parse_expression(problem.prompt)
        assert len(terms) == 4 and ops == ["+"] * 3
        assert all(10 <= t <= 99 for t in terms)
        assert int(problem.answer) == sum(terms)


def test_running_values_never_go_negative():
    task = ArithmeticTask(operators="-", num_terms=3)
    for problem in task.train_batch(200, random.Random(1)):
        steps = solution_steps(task.reference_solution(problem))
        assert all(step.result >= 0 for step in steps)


def test_products_after_sums_are_parenthesised():
    assert format_expression([3, 4, 5], ["+", "*"]) == "(3+4)*5"
    assert format_expression([3, 4, 5], ["*", "+"]) == "3*4+5"
    task = ArithmeticTask(digits=1, operators="+*")
    problem = task.make_problem([3, 4, 5], ["+", "*"])
    assert problem.answer == "35"
    assert task.reference_solution(problem) == "3+4=7,7*5=35 \\boxed{35}"


def test_draws_are_deterministic():
    task = ArithmeticTask()
    assert task.train_batch(20, random.Random(7)) == task.train_batch(20, random.Random(7))
    assert task.heldout() == ArithmeticTask().heldout()
    assert task.heldout(10) == task.heldout()[:10]


def test_heldout_is_distinct_and_disjoint_from_training():
    task = ArithmeticTask(heldout_size=300)
    heldout = task.heldout()
    ids = {p.id for p in heldout}
    assert len(heldout) == len(ids) == 300
    assert all(task.is_heldout(i) for i in ids)
    train = task.train_batch(5000, random.Random(0))
    assert not ids & {p.id for p in train}
    assert not any(task.is_heldout(p.id) for p in train)


def test_heldout_seed_changes_the_draw_not_the_split():
    first, second = ArithmeticTask(heldout_seed=1), ArithmeticTask(heldout_seed=2)
    assert first.heldout(50) != second.heldout(50)
    assert all(first.is_heldout(p.id) for p in second.heldout())


def test_asking_for_too_many_heldout_problems_fails():
    with pytest.raises(ValueError, match="held-out"):
        ArithmeticTask(heldout_size=10).heldout(11)


def test_teacher_without_errors_is_the_reference():
    task = ArithmeticTask()
    rng = random.Random(0)
    for problem in task.train_batch(100, rng):
        assert task.teacher_solution(problem, 0.0, rng) == task.reference_solution(problem)


@pytest.mark.parametrize("error_rate", [0.1, 0.5])
def test_teacher_error_rate_is_as_configured(error_rate):
    # 4000 traces: binomial standard deviation <= 0.008, the tolerance is ~4 of them
    task = ArithmeticTask()
    rng = random.Random(3)
    problems = task.train_batch(4000, rng)
    wrong = sum(
        final_answer(task.teacher_solution(p, error_rate, rng)) != p.answer for p in problems
    )
    assert abs(wrong / len(problems) - error_rate) < 0.03


def test_teacher_answer_is_wrong_exactly_when_it_made_a_mistake():
    task = ArithmeticTask(num_terms=4, operators="+-")
    rng = random.Random(5)
    mistakes = 0
    for problem in task.train_batch(2000, rng):
        trace = task.teacher_solution(problem, 0.5, rng)
        steps = solution_steps(trace)
        assert len(steps) == 3
        wrong_steps = [s for s in steps if not s.correct]
        assert len(wrong_steps) <= 1
        assert (final_answer(trace) != problem.answer) == bool(wrong_steps)
        # the wrong result is carried into the next step, and the mistake is a carry (10) or a slip (1)
        for earlier, later in itertools.pairwise(steps):
            assert later.left == earlier.result
        for step in wrong_steps:
            true_result = {"+": step.left + step.right, "-": step.left - step.right}[step.op]
            assert abs(step.result - true_result) in (1, 10)
        mistakes += bool(wrong_steps)
    assert mistakes > 0


def test_carry_mistakes_drop_the_carry_and_other_mistakes_slip_by_one():
    # 37+48: units 7+8 carry -> a mistake drops it: 75; 85-19: units 5<9 borrow -> dropped: 76
    task = ArithmeticTask(num_terms=2)
    rng = random.Random(0)
    add = task.make_problem([37, 48], ["+"])
    sub = task.make_problem([85, 19], ["-"])
    assert task.teacher_solution(add, 1.0, rng) == "37+48=75 \\boxed{75}"
    assert task.teacher_solution(sub, 1.0, rng) == "85-19=76 \\boxed{76}"
    # 12+33=45 has no carry -> the units digit slips: 44 or 46
    no_carry = task.make_problem([12, 33], ["+"])
    slips = {task.teacher_solution(no_carry, 1.0, rng) for _ in range(20)}
    assert slips == {"12+33=44 \\boxed{44}", "12+33=46 \\boxed{46}"}


def test_final_answer():
    assert final_answer("37+48=85,85-19=66 \\boxed{66}") == "66"
    assert final_answer("\\boxed{1} then \\boxed{ 07 }") == "7"
    assert final_answer("37+48=85,85-19=") is None


def test_invalid_settings_fail():
    with pytest.raises(ValueError):
        ArithmeticTask(operators="+/")
    with pytest.raises(ValueError):
        ArithmeticTask(num_terms=1)
    with pytest.raises(ValueError):
        ArithmeticTask().teacher_solution(Problem("1+1", "1+1=", "2"), 1.5, random.Random(0))
