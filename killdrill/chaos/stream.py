"""A chaos job's runs on disk as they finish, its memory flat in the number of runs.

Each finished run is one line of ``runs.jsonl`` (in the report folder; a temporary file without
one): its record and its case.  In memory the job keeps only what its end needs: the failing runs
in full (shrinking and every report show them), the indexes of the
:data:`~killdrill.records.FULL_CLEAN_CASES` clean runs with the smallest indexes (the ones
``report.json`` keeps whole and ``report.html`` draws), and two integers per run saying where its
line is.  ``report.json`` and ``junit.xml`` are then written run by run from that file, in index
order, and ``report.html`` from the failing runs, the drawn ones and counts: 10^4 runs need no
more memory than 10^3.  ``ChaosResult.runs`` / ``.cases`` read the same file lazily.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import tempfile
import weakref
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, overload

from killdrill.chaos.report import (
    ERRORED,
    VIOLATED,
    RunRecord,
    chaos_counts,
    spread,
    write_junit_stream,
)
from killdrill.chaos.shrink import Shrunk
from killdrill.errors import UsageError
from killdrill.records import FULL_CLEAN_CASES, CaseResult, Discovery

__all__ = ["RUNS_FILE", "RunStream", "merged_reports", "write_json_stream"]

RUNS_FILE = "runs.jsonl"
"""One line per finished run (``{"run": ..., "case": ...}``), in the order runs finished."""

_FAILED = (VIOLATED, ERRORED)


class RunStream:
    """The runs of one job: appended as they finish, read back in index order."""

    def __init__(self, discovery: Discovery, folder: Path | None = None, keep: int | None = None) -> None:
        self.discovery = discovery
        self.keep = FULL_CLEAN_CASES if keep is None else keep
        self.path = folder / RUNS_FILE if folder is not None else None
        self._fh: IO[bytes] = (
            open(self.path, "w+b") if self.path is not None else tempfile.TemporaryFile("w+b")  # noqa: SIM115
        )
        # read back as long as the job's result is used: closed when the stream is gone (or at exit)
        self._closer = weakref.finalize(self, self._fh.close)
        self._index = array("q")  # run index, in the order runs finished
        self._offset = array("q")  # where its line starts
        self._order: array[int] | None = None  # positions sorted by index (made on first read)
        self._kept: list[int] = []  # max-heap (negated) of the smallest clean indexes kept whole
        # Failing runs are on disk in full; in memory only those the end reads: the first of each
        # set of kinds (shrinking) and the first ``keep`` by index (report.html draws them).
        self.failing: dict[int, tuple[RunRecord, CaseResult]] = {}
        self._failing_first: list[int] = []  # max-heap (negated) of the smallest failing indexes
        self._first_of: dict[tuple[str, ...], int] = {}  # kinds -> smallest index showing them
        self.violations = 0
        self.errors = 0

    def __len__(self) -> int:
        return len(self._index)

    def add(self, rec: RunRecord, case: CaseResult) -> None:
        """One finished run: its line is written (and flushed) now, a failing run also kept."""
        if rec.outcome in _FAILED:
            self._keep_failing(rec, case)
        else:
            heapq.heappush(self._kept, -rec.index)
            if len(self._kept) > self.keep:
                heapq.heappop(self._kept)
            if -self._kept[0] < rec.index:  # not among the smallest: never drawn or kept whole
                case = case.abridge()
        self._fh.seek(0, 2)
        self._index.append(rec.index)
        self._offset.append(self._fh.tell())
        line = json.dumps({"run": rec.to_dict(), "case": case.to_dict()}, default=str)
        self._fh.write(line.encode() + b"\n")
        self._fh.flush()
        self._order = None

    def _keep_failing(self, rec: RunRecord, case: CaseResult) -> None:
        self.violations += rec.outcome == VIOLATED
        self.errors += rec.outcome == ERRORED
        self.failing[rec.index] = (rec, case)
        dropped = []
        heapq.heappush(self._failing_first, -rec.index)
        if len(self._failing_first) > self.keep:
            dropped.append(-heapq.heappop(self._failing_first))
        first = self._first_of.get(rec.kinds)
        if first is None or rec.index < first:
            self._first_of[rec.kinds] = rec.index
            if first is not None:
                dropped.append(first)
        needed = set(self._first_of.values())
        for i in dropped:
            if i not in needed and -i not in self._failing_first:
                self.failing.pop(i, None)

    def close(self) -> None:
        self._closer()

    # ---- reading back, in index order --------------------------------------------------------
    def _positions(self) -> Sequence[int]:
        """Line positions by run index: as written when runs finished in order (one process),
        else sorted once (workers finish out of order)."""
        index = self._index
        if all(index[i] < index[i + 1] for i in range(len(index) - 1)):
            return range(len(index))
        if self._order is None:
            self._order = array("q", sorted(range(len(index)), key=index.__getitem__))
        return self._order

    def _line(self, position: int) -> dict[str, Any]:
        self._fh.seek(self._offset[position])
        data: dict[str, Any] = json.loads(self._fh.readline())
        return data

    def _kept_whole(self) -> set[int]:
        return {-i for i in self._kept}

    def lines(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(run dict, case dict)`` of every run by index; a clean case not kept whole abridged."""
        whole = self._kept_whole()
        for p in self._positions():
            data = self._line(p)
            run, case = data["run"], data["case"]
            if run["outcome"] not in _FAILED and run["index"] not in whole and not case.get("abridged"):
                case = CaseResult.from_dict(case).abridge().to_dict()
            yield run, case

    def runs(self) -> Sequence[RunRecord]:
        return _Lazy(self, lambda run, case: RunRecord.from_dict(run))

    def cases(self) -> Sequence[CaseResult]:
        return _Lazy(self, lambda run, case: CaseResult.from_dict(case))

    def run_dicts(self) -> Sequence[dict[str, Any]]:
        return _Lazy(self, lambda run, case: run)

    # ---- the reports ---------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        from killdrill.report.drill import summarize_cases

        out = summarize_cases(self.cases())
        out.update(chaos_counts(self.runs()))
        return out

    def report_parts(self, header: Mapping[str, Any], failures: Sequence[Any]) -> dict[str, Any]:
        """``report.json``'s dict with its two long lists left lazy (read from disk when written)."""
        return {
            "chaos": dict(header),
            "discovery": self.discovery.to_dict(),
            "runs": self.run_dicts(),
            "cases": _Lazy(self, lambda run, case: case),
            "spread": spread(self.discovery, self.runs()),
            "failures": [f.to_dict() for f in failures],
            "summary": self.summary(),
        }

    def write_reports(self, folder: Path, header: Mapping[str, Any], failures: Sequence[Any]) -> None:
        """``report.json`` and ``junit.xml`` streamed run by run; ``report.html`` from the failing
        runs, the drawn clean ones and counts (bounded, whatever the number of runs)."""
        from killdrill.report.html import render_html
        from killdrill.report.outputs import atomic_write_text

        data = self.report_parts(header, failures)
        write_json_stream(folder / "report.json", data)
        write_junit_stream(folder / "junit.xml", data["chaos"], self.runs(), self._junit_pairs())
        atomic_write_text(folder / "report.html", render_html(self._html_data(data)))

    def _junit_pairs(self) -> Iterator[tuple[RunRecord, CaseResult]]:
        for run, case in self.lines():
            yield RunRecord.from_dict(run), CaseResult.from_dict(case)

    def _html_data(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """What the page draws: the failing runs (the first ``MAX_TIMELINES`` with their cases, the
        rest as lines), the clean runs kept whole, and counts of every run."""
        from killdrill.report.html import MAX_TIMELINES, matrix_counts

        whole = self._kept_whole()
        drawn = set(sorted(self.failing)[:MAX_TIMELINES]) | whole
        pairs: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        for run in self.run_dicts():  # the failing runs past those drawn: a line each
            i = run["index"]
            if i in drawn:
                full = self.failing.get(i)
                pairs.append((run, full[1].to_dict() if full is not None else self._case_of(i)))
            elif run["outcome"] in _FAILED:
                pairs.append((run, None))
        counts = matrix_counts(data["spread"], self.run_dicts())
        return {**data, "runs": [r for r, _ in pairs], "cases": [c for _, c in pairs], "html_counts": counts}

    def _case_of(self, index: int) -> dict[str, Any]:
        for p in self._positions():
            if self._index[p] == index:
                case: dict[str, Any] = self._line(p)["case"]
                return case
        raise KeyError(index)


class _Lazy(Sequence[Any]):
    """A read-only sequence over a stream's runs (in index order), each item made on access."""

    def __init__(self, stream: RunStream, make: Any) -> None:
        self._stream = stream
        self._make = make

    def __len__(self) -> int:
        return len(self._stream)

    def __iter__(self) -> Iterator[Any]:
        for run, case in self._stream.lines():
            yield self._make(run, case)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        position = self._stream._positions()[i]
        data = self._stream._line(position)
        run, case = data["run"], data["case"]
        if (
            run["outcome"] not in _FAILED
            and run["index"] not in self._stream._kept_whole()
            and not case.get("abridged")
        ):
            case = CaseResult.from_dict(case).abridge().to_dict()
        return self._make(run, case)


@contextlib.contextmanager
def merged_reports(paths: Sequence[str | os.PathLike[str]]) -> Iterator[dict[str, Any]]:
    """The shards of one seed's chaos job joined, as ``report.json``'s dict with its runs and
    cases read lazily (write it with :func:`write_json_stream`); overlapping or foreign shards are
    a UsageError.

    One shard is parsed at a time and its runs go to a :class:`RunStream` (a temporary file),
    which keeps only what the end needs: before, every shard's JSON and every case were held at
    once (a 10,000-run shard is ~9 MB of JSON, ten times that parsed).  As in one job, the first
    clean cases by index are kept whole and later ones abridged."""
    stream: RunStream | None = None
    first: dict[str, Any] = {}
    seen: set[int] = set()
    failures: dict[tuple[str, tuple[str, ...]], Shrunk] = {}
    shards, stopped, elapsed = set(), set(), 0.0
    try:
        for p in paths:
            data = json.loads(Path(p).read_text(encoding="utf-8"))
            h = data["chaos"]
            if stream is None:
                first, stream = h, RunStream(Discovery.from_dict(data["discovery"]))
            elif h["seed"] != first["seed"] or h["command"] != first["command"]:
                raise UsageError(
                    f"{p}: seed {h['seed']} / command differ from {paths[0]}: not shards of one job"
                )
            for r, c in zip(data["runs"], data["cases"], strict=True):
                if r["index"] in seen:
                    raise UsageError(f"{p}: run {r['index']} is also in another file: shards overlap")
                seen.add(r["index"])
                stream.add(RunRecord.from_dict(r), CaseResult.from_dict(c))
            for f in data.get("failures", ()):
                shrunk = Shrunk.from_dict(f)
                failures.setdefault((shrunk.schedule, shrunk.kinds), shrunk)
            shards.add(h["shard"])
            stopped.add(h.get("stopped", "runs"))
            elapsed = max(elapsed, h.get("elapsed_s", 0.0))
        if stream is None:
            raise UsageError("no chaos report to merge")
        header = {
            **first,
            "shard": ",".join(sorted(shards)),
            "stopped": ",".join(sorted(stopped)),
            "elapsed_s": elapsed,
        }
        yield stream.report_parts(header, list(failures.values()))
    finally:
        if stream is not None:
            stream.close()


def write_json_stream(path: Path, data: Mapping[str, Any]) -> None:
    """``report.json`` as :func:`killdrill.report.drill.write_json` writes it (the same value
    parsed back), its long lists written one item at a time."""
    from killdrill.report.jsonfile import dumps
    from killdrill.report.outputs import atomic_writer

    item = json.JSONEncoder(ensure_ascii=False, default=str, separators=(", ", ": "))
    with atomic_writer(path) as fh:
        fh.write("{")
        for n, (key, value) in enumerate(data.items()):
            fh.write(("," if n else "") + "\n  " + item.encode(key) + ": ")
            if isinstance(value, _Lazy):
                if not len(value):
                    fh.write("[]")
                    continue
                fh.write("[")
                for k, v in enumerate(value):
                    fh.write(("," if k else "") + "\n    " + item.encode(v))
                fh.write("\n  ]")
            else:
                fh.write(dumps(value).replace("\n", "\n  "))
        fh.write("\n}\n")
