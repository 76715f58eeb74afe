"""A chaos job streams its runs to ``runs.jsonl`` as they finish and writes report.json, junit.xml
and report.html from it: the job's memory is flat in the number of runs, and the
reports say what the in-memory ones said (the same JSON value, the same testcases, the same page
counts), failing runs in full, clean ones past the first 60 abridged, in any finish order."""

from __future__ import annotations

import json
import random
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from killdrill.chaos.report import ERRORED, VIOLATED, RunRecord, report_dict, write_reports
from killdrill.chaos.stream import RUNS_FILE, RunStream, merged_reports, write_json_stream
from killdrill.records import (
    Attempt,
    Call,
    CaseResult,
    CatalogueEntry,
    Discovery,
    LedgerSnapshot,
    TraceEvent,
    Violation,
)

LEDGER = LedgerSnapshot(calls=(Call(0, "payments", "charge", "k", {"n": 1}, "created", None, 1, 1, 0.0),))
TRACE = (TraceEvent("before:pay", 1, 0.0, 1),)
DISC = Discovery(("agent",), (CatalogueEntry("before:pay", "before:pay", 1, 0.0),), LEDGER)
HEADER = {"seed": 7, "shard": "1/1", "command": ["agent"]}


class CleanCases:
    """The job's former in-memory keeping, the oracle the streamed reports must equal: every
    failing case in full, and the clean ones with the smallest indexes; later ones abridged."""

    def __init__(self, keep: int | None = None) -> None:
        from killdrill.records import FULL_CLEAN_CASES

        self.keep = FULL_CLEAN_CASES if keep is None else keep
        self._full: list[int] = []  # a max-heap of the kept indexes (negated)

    def offer(self, rec: RunRecord, case: CaseResult, cases: dict[int, Any]) -> CaseResult:
        """``case`` as the job should keep it; may abridge an earlier kept one in ``cases``
        (index -> (record, case))."""
        import heapq

        if rec.outcome in (VIOLATED, ERRORED):
            return case
        heapq.heappush(self._full, -rec.index)
        if len(self._full) <= self.keep:
            return case
        evicted = -heapq.heappop(self._full)
        if evicted == rec.index:
            return case.abridge()
        old_rec, old_case = cases[evicted]
        cases[evicted] = (old_rec, old_case.abridge())
        return case


def case(i: int, bad: bool) -> CaseResult:
    violations = (Violation("duplicate_effect", "twice", "payments", "charge"),) if bad else ()
    attempts = (Attempt(1, "before:pay", "killed", -9, 1.0, TRACE, killed_at="before:pay"),)
    return CaseResult(("agent",), "before:pay", f"t{i}", f"/w/{i}", attempts, violations, ledger=LEDGER)


def test_streamed_reports_say_what_the_in_memory_ones_said(tmp_path: Path) -> None:
    order = list(range(150))
    random.Random(7).shuffle(order)  # workers finish out of order
    (tmp_path / "streamed").mkdir()
    stream = RunStream(DISC, tmp_path / "streamed")
    kept: dict[int, tuple[RunRecord, CaseResult]] = {}
    keeper = CleanCases()  # what the job kept in memory before
    for i in order:
        c = case(i, bad=i % 9 == 4)
        rec = RunRecord.of(i, c, 0.1)
        stream.add(rec, c)
        kept[i] = (rec, keeper.offer(rec, c, kept))
    assert len((tmp_path / "streamed" / RUNS_FILE).read_text().splitlines()) == 150
    assert sorted(stream.failing) == [i for i in range(150) if i % 9 == 4]  # the first 60 failing stay
    stream.write_reports(tmp_path / "streamed", HEADER, [])
    ordered = [kept[i] for i in sorted(kept)]
    in_memory = report_dict(HEADER, DISC, [r for r, _ in ordered], [c for _, c in ordered], [])
    write_reports(tmp_path / "memory", in_memory)

    def load(folder: str, name: str) -> str:
        return (tmp_path / folder / name).read_text(encoding="utf-8")

    assert json.loads(load("streamed", "report.json")) == json.loads(json.dumps(in_memory, default=str))
    assert [r.index for r in stream.runs()] == list(range(150))
    assert [c.abridged for c in stream.cases()] == [kept[i][1].abridged for i in range(150)]

    def cases(xml: str) -> list[tuple[str, list[str], str]]:
        suite = ET.fromstring(xml).find("testsuite")
        assert suite is not None
        return [
            (suite.get("tests") or "", [e.tag for e in tc], ET.tostring(tc, encoding="unicode"))
            for tc in suite
        ]

    assert cases(load("streamed", "junit.xml")) == cases(load("memory", "junit.xml"))
    streamed, memory = load("streamed", "report.html"), load("memory", "report.html")
    assert streamed == memory  # same failing runs, the same clean ones drawn, the same counts
    assert "run(s) without a violation; " in streamed


def test_the_jobs_memory_is_flat_in_runs(tmp_path: Path) -> None:
    """What the job holds per clean run is two integers, not the run: 10x the runs, ~the memory."""
    stream = RunStream(DISC, None)
    cases = [case(i, bad=False) for i in range(3)]
    tracemalloc.start()
    try:
        for i in range(200):
            stream.add(RunRecord.of(i, cases[i % 3], 0.1), cases[i % 3])
        small = tracemalloc.get_traced_memory()[0]
        for i in range(200, 2200):
            stream.add(RunRecord.of(i, cases[i % 3], 0.1), cases[i % 3])
        large = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert (large - small) / 2000 < 100, f"{(large - small) / 2000:.0f} bytes kept per run"
    assert len(stream.runs()) == 2200 and stream.runs()[2199].index == 2199
    stream.close()


def _job(folder: Path, indexes: list[int], shard: str) -> Path:
    """A job (or a shard of one) of ``indexes``, its reports written as the job writes them."""
    folder.mkdir()
    stream = RunStream(DISC, folder)
    for i in indexes:
        c = case(i, bad=i % 9 == 4)
        stream.add(RunRecord.of(i, c, 0.1), c)
    stream.write_reports(folder, {**HEADER, "shard": shard}, [])
    stream.close()
    return folder / "report.json"


def test_merged_shards_say_what_one_job_said_holding_one_shard_at_a_time(tmp_path: Path) -> None:
    """``killdrill report`` of two shards: the report of the same runs made by one job (the first
    60 clean cases by index whole, the rest abridged, failing ones in full), but the shard, and
    the merge holds one shard's JSON at a time, not all of them (before: every shard and every
    case at once)."""
    whole = json.loads(_job(tmp_path / "one", list(range(300)), "1/1").read_text())
    shards = [_job(tmp_path / f"s{k}", list(range(k - 1, 300, 2)), f"{k}/2") for k in (1, 2)]
    out = tmp_path / "merged.json"
    with merged_reports(shards) as merged:
        write_json_stream(out, merged)
        assert merged["summary"]["runs"] == 300 and merged["summary"]["runs_violated"] == 33
    data = json.loads(out.read_text())
    assert data.pop("chaos")["shard"] == "1/2,2/2" and whole.pop("chaos")["shard"] == "1/1"
    assert data == whole
    assert sum(not c.get("abridged") for c in data["cases"]) == 60 + 33

    big = [_job(tmp_path / f"b{k}", list(range(k - 1, 1200, 4)), f"{k}/4") for k in (1, 2, 3, 4)]
    one_shard = len(big[0].read_bytes())
    tracemalloc.start()
    try:
        with merged_reports(big) as merged:
            write_json_stream(tmp_path / "big.json", merged)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # one shard parsed is ~10x its bytes; the four at once were ~4 times that
    assert peak < 15 * one_shard, f"peak {peak / 2**20:.1f} MB for shards of {one_shard / 2**20:.1f} MB"
    assert [r["index"] for r in json.loads((tmp_path / "big.json").read_text())["runs"]] == list(range(1200))


def test_a_chaos_report_is_known_by_its_first_bytes(tmp_path: Path, monkeypatch: Any) -> None:
    """``killdrill report`` tells shards from drill reports before merging them: the job's
    report.json begins with its header, so it is not parsed twice; other JSON is read whole, and a
    shard cut short is a one-line error of the merge (JSONDecodeError is a ValueError)."""
    import pytest

    from killdrill.chaos import report

    shard = _job(tmp_path / "s", [0, 1], "1/1")
    reordered = tmp_path / "reordered.json"
    reordered.write_text(json.dumps({"runs": [], **json.loads(shard.read_text())}))
    drill = tmp_path / "drill.json"
    drill.write_text(json.dumps({"discovery": {}, "cases": []}))
    cut = tmp_path / "cut.json"
    cut.write_text(shard.read_text()[:300])
    with monkeypatch.context() as m:
        m.setattr(report.json, "loads", lambda *a, **k: pytest.fail("parsed"))
        assert report.is_chaos_report(shard) and report.is_chaos_report(cut)
    assert report.is_chaos_report(reordered) and not report.is_chaos_report(drill)
    assert not report.is_chaos_report(tmp_path / "missing.json")
    with pytest.raises(ValueError), merged_reports([cut]):
        pass


def test_a_report_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path, capsys: Any) -> None:
    """``killdrill report ... --json FOLDER`` (a folder, no permission, a full disk): the user's
    mistake in one line, exit 2, for merged shards and for drill reports alike (was a traceback)."""
    from killdrill.cli.commands import main

    shard = _job(tmp_path / "s", [0, 1, 2], "1/1")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"cases": []}))
    for report in (shard, cases):
        assert main(["report", str(report), "--json", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err == f"killdrill: error: --json {tmp_path}: cannot write the report: Is a directory\n", err


def test_a_stream_nobody_closed_closes_its_file_when_it_is_gone(tmp_path: Path) -> None:
    """A job's result reads its runs back as long as it is used (the CLI prints it, an API caller
    keeps it): the file closes with the stream, with no ``ResourceWarning`` at exit."""
    import gc
    import warnings

    stream = RunStream(DISC, tmp_path)
    fh = stream._fh
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        del stream
        gc.collect()
    assert fh.closed
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)]
