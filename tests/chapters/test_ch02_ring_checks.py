"""The judging half of chapter 02's checks on made-up runs, and the visible checks on real ranks."""

from pathlib import Path

import pytest
import torch

from course_lib.grading.attempt.rank_attempt import RankRun, fail_with
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.checks.ch02_ring.judge import forbidden_problems, traffic_problems, value_problems
from course_lib.grading.checks.ch02_ring.ranks import (
    RingCase,
    RingOutcome,
    _student_frames,
    expected_result,
    rank_input,
)
from course_lib.grading.checks.ch02_ring.visible import (
    check_ring_all_gather,
    check_ring_all_reduce,
    check_ring_all_reduce_no_collectives,
    check_ring_all_reduce_no_deadlock,
    check_ring_all_reduce_traffic,
    check_ring_reduce_scatter,
)

ROOT = Path(__file__).resolve().parents[2]
SEED, N = 7, 4
EIGHT = RingCase((8,))


def ring_events(rank, n, chunk_bytes, messages):
    right, left = (rank + 1) % n, (rank - 1) % n
    one_step = [("irecv", left, chunk_bytes), ("isend", right, chunk_bytes)]
    return one_step * messages


def all_reduce_run(case=EIGHT, after=None, events=None, returned=None, base=None):
    """A made-up world-size-4 run of one all-reduce case where every rank ends with ``after``."""
    expected = expected_result(case, SEED, 0, N, "all_reduce")
    after = expected if after is None else after
    outcome = lambda rank: RingOutcome(after, base, returned,  # noqa: E731
                                       ring_events(rank, N, 8, 6) if events is None else events(rank))
    return RankRun(N, tuple((outcome(rank),) for rank in range(N)), cases=(case,), seed=SEED)


def test_inputs_are_reproducible_and_differ_per_rank():
    case = RingCase((5, 3), "int64")
    a, _ = rank_input(case, SEED, 0, 1, N, "all_reduce")
    assert torch.equal(a, rank_input(case, SEED, 0, 1, N, "all_reduce")[0])
    assert not torch.equal(a, rank_input(case, SEED, 0, 2, N, "all_reduce")[0])
    assert not torch.equal(a, rank_input(case, SEED + 1, 0, 1, N, "all_reduce")[0])
    view, base = rank_input(RingCase((6,), "float64", strided=True), SEED, 0, 0, N, "all_reduce")
    assert not view.is_contiguous() and view.data_ptr() == base.data_ptr()
    assert bool((base[:, 1] == -5555).all())


def test_expected_results():
    case = RingCase((10,), "float32")
    inputs = [rank_input(case, SEED, 3, r, N, "all_reduce")[0] for r in range(N)]
    assert torch.allclose(expected_result(case, SEED, 3, N, "all_reduce"), sum(inputs), atol=1e-6)
    gathered = expected_result(case, SEED, 3, N, "all_gather")
    for owner in range(N):
        own = torch.tensor_split(rank_input(case, SEED, 3, owner, N, "all_gather")[0], N)[owner]
        assert torch.equal(torch.tensor_split(gathered, N)[owner], own)


def test_a_perfect_ring_has_no_problem():
    run = all_reduce_run()
    assert value_problems(run, "all_reduce") == traffic_problems(run, "all_reduce") == []
    assert forbidden_problems(run) == []


def test_not_in_place_is_named():
    case = RingCase((8,))
    untouched = rank_input(case, SEED, 0, 0, N, "all_reduce")[0]
    run = all_reduce_run(after=untouched, returned=expected_result(case, SEED, 0, N, "all_reduce"))
    problems = value_problems(run, "all_reduce")
    assert len(problems) == N and "in place" in problems[0]
    assert value_problems(run, "all_reduce", need_in_place=False) == []


def test_writing_outside_a_view_is_caught():
    base = torch.zeros(8, 2)
    assert "outside the view" in value_problems(all_reduce_run(base=base), "all_reduce")[0]


def test_wrong_values_are_shown():
    run = all_reduce_run(after=torch.zeros(8))
    assert "expected" in value_problems(run, "all_reduce")[0]


@pytest.mark.parametrize("events, words", [
    (lambda r: ring_events(r, N, 8, 6)[:-2], "sent 5 messages"),
    (lambda r: [("isend", (r - 1) % N, 8)] * 6, "right neighbour"),
    (lambda r: [("isend", (r + 1) % N, 32)] * 6, "more than 2*(N-1)/N"),
    (lambda r: [("all_reduce", None, 32)], "only send/recv/isend/irecv"),
    (lambda r: ring_events(r, N, 8, 6) + [("recv", (r + 2) % N, 8)], "left neighbour"),
])
def test_traffic_problems(events, words):
    problems = traffic_problems(all_reduce_run(events=events), "all_reduce")
    assert problems and words in problems[0]


def test_collectives_and_errors_are_reported():
    run = all_reduce_run(events=lambda r: [("broadcast", None, 32)])
    assert "broadcast" in forbidden_problems(run)[0]
    failed = RankRun(N, error="ring_all_reduce deadlocked", hung=True, cases=(RingCase((8,)),), seed=SEED)
    assert value_problems(failed, "all_reduce") == traffic_problems(failed, "all_reduce") == [failed.error]


def test_fail_with_lists_the_first_problems():
    fail_with([], "nothing")
    with pytest.raises(AssertionError, match=r"(?s)wrong:\n- p0\n- p1\n\(and 3 more\)"):
        fail_with([f"p{i}" for i in range(5)], "wrong", limit=2)


def test_tracebacks_start_at_the_students_code():
    import course_lib.grading.checks.ch02_ring.ranks as module

    text = (f'Traceback (most recent call last):\n  File "{module.__file__}", line 97, in _run_cases\n'
            '    returned = function(tensor)\n               ^^^^^^^^\n'
            '  File "<student cells>", line 3, in ring_all_reduce\nNotImplementedError\n')
    assert _student_frames(text) == ('Traceback (most recent call last):\n  File "<student cells>", line 3, '
                                     'in ring_all_reduce\nNotImplementedError')


@pytest.mark.slow
def test_visible_checks_on_real_ranks():
    from course_lib.grading import instructor_checks
    from course_lib.notebook_cells import sources_by_id

    cells = instructor_checks("ch02_ring").EXERCISE_CELLS

    sources = sources_by_id(ROOT / "solutions" / "02_collectives" / "02_collectives.ipynb", cells)
    check_ring_reduce_scatter(StudentFunction("ring_reduce_scatter", sources=sources))
    check_ring_all_gather(StudentFunction("ring_all_gather", sources=sources))
    reference = StudentFunction("ring_all_reduce", sources=sources)
    for check in (check_ring_all_reduce, check_ring_all_reduce_traffic, check_ring_all_reduce_no_collectives,
                  check_ring_all_reduce_no_deadlock):
        check(reference)
    cheat = StudentFunction("ring_all_reduce", sources=["def ring_all_reduce(t):\n    dist.all_reduce(t)\n"])
    with pytest.raises(AssertionError, match="dist.all_reduce is not allowed"):
        check_ring_all_reduce(cheat)
    with pytest.raises(TypeError, match="without calling it"):
        check_ring_all_reduce(None)


def test_the_all_reduce_report_is_shared_only_by_the_same_code(monkeypatch):
    from course_lib.grading import instructor_checks
    ch02_ring = instructor_checks("ch02_ring")

    calls = []
    monkeypatch.setattr(ch02_ring, "_runs", lambda student, *args: calls.append(student) or [])
    ch02_ring._REPORTS.clear()
    namespace = {}
    exec("def helper(t):\n    pass\n\ndef ring_all_reduce(t):\n    helper(t)\n", namespace)
    ch02_ring.check_ring_all_reduce_hidden(namespace["ring_all_reduce"])
    ch02_ring.check_ring_all_reduce_traffic_hidden(namespace["ring_all_reduce"])
    assert len(calls) == 1
    exec("def helper(t):\n    return t\n", namespace)  # a fixed helper, the same ring_all_reduce
    ch02_ring.check_ring_all_reduce_hidden(namespace["ring_all_reduce"])
    assert len(calls) == 2
    ch02_ring._REPORTS.clear()
