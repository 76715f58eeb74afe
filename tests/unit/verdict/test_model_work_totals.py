"""The model line over several cases: the clean run's calls are one clean run's, never the sum
of every case's clean runs called one."""

from __future__ import annotations

from killdrill.verdict.model_work import render_model_work, sum_model_work


def _work(calls: int, baseline: int) -> dict[str, int]:
    return {
        "calls": calls,
        "tokens": 10 * calls,
        "baseline_calls": baseline,
        "baseline_tokens": 10 * baseline,
        "respent_calls": max(0, calls - baseline),
        "respent_tokens": max(0, 10 * (calls - baseline)),
    }


def test_one_case_compares_with_a_clean_run() -> None:
    assert "(a clean run: 4 calls, 40 tokens)" in render_model_work(_work(7, 4))


def test_a_sum_over_cases_says_how_many_clean_runs_it_sums() -> None:
    total = sum_model_work([_work(7, 4), _work(3, 4), {}])
    text = render_model_work(total)
    assert "a clean run" not in text, text
    assert "2 clean runs, one per case: 8 calls, 80 tokens" in text, text
    assert total["cases"] == 2
