"""Micro-batching: the queries of concurrent requests share encoder batches.

Requests put a job (their queries and k) on a bounded queue; one worker thread takes every
job waiting (up to `batch_queries` queries), searches their distinct queries together in
chunks of at most `batch_queries`, and hands each job its rows. Only the worker touches the
retriever, so nothing else waits on the encoder. A batch whose search fails is searched again
job by job, so an error reaches only the requests that cause it.

A job holding a long query (over `long_query_chars` characters: up to 512 tokens, seconds of
CPU each) is not searched in one go: the worker searches one of its queries between two
batches of short jobs, so a few long requests never hold every short one behind them.

Overload (adaptive LIFO): while the oldest waiting job has waited more than `lifo_after_s`,
the newest jobs are served first. Their clients have the most time left; the oldest would
mostly time out anyway, and a job whose client has gone is dropped unsearched. Served
first-in first-out, an overloaded queue answers every request too late.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.retrieval.base import Passage, Retriever
from pipeline.retrieval.limits import ENCODE_BATCH_QUERIES, MAX_WAITING_REQUESTS


class QueueFull(RuntimeError):
    """More jobs are waiting than the queue holds: the caller should retry later."""


@dataclass
class _Job:
    queries: list[str]
    k: int
    done: Callable[[list[list[Passage]] | None, BaseException | None], None]
    abandoned: Callable[[], bool] = lambda: False  # the requester has gone: skip the work
    size: int = field(init=False)
    submitted: float = field(default_factory=time.monotonic)
    rows: list[list[Passage]] = field(default_factory=list)  # long jobs: results so far

    def __post_init__(self) -> None:
        self.size = len(self.queries)


class MicroBatcher:
    """One worker thread that serves every search of `retriever`, many requests per batch."""

    def __init__(self, retriever: Retriever, batch_queries: int = ENCODE_BATCH_QUERIES,
                 max_jobs: int = MAX_WAITING_REQUESTS,
                 long_query_chars: int = 1024, lifo_after_s: float = 15.0) -> None:
        if batch_queries < 1 or max_jobs < 1:
            raise ValueError("batch_queries and max_jobs must be >= 1")
        self.retriever = retriever
        self.batch_queries = batch_queries
        self.max_jobs = max_jobs
        self.long_query_chars = long_query_chars
        self.lifo_after_s = lifo_after_s
        self._pending: deque[_Job] = deque()  # submitted, oldest first
        self._long: deque[_Job] = deque()  # jobs with a long query, searched a query at a time
        self._ready = threading.Condition()
        self._closing = False
        self.batches = 0  # encoder batches run (for /health and tests)
        self.queries_served = 0
        self.dropped = 0  # jobs whose requester left before the worker reached them
        self.lifo_batches = 0  # batches picked newest first (overload)
        self._worker = threading.Thread(target=self._run, name="retrieval-batcher", daemon=True)
        self._worker.start()

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def submit(self, queries: Sequence[str], k: int,
               done: Callable[[list[list[Passage]] | None, BaseException | None], None],
               abandoned: Callable[[], bool] = lambda: False) -> None:
        """Queue a search; `done(results, error)` is called from the worker thread, unless
        `abandoned()` is true by the time the worker reaches the job (it is then dropped)."""
        with self._ready:
            if len(self._pending) >= self.max_jobs:
                raise QueueFull(f"{self.max_jobs} requests already waiting")
            self._pending.append(_Job(list(queries), k, done, abandoned))
            self._ready.notify()

    async def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Awaitable search for an event loop (the server's request handlers)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def done(results: list[list[Passage]] | None, error: BaseException | None) -> None:
            def settle() -> None:
                if future.cancelled():
                    return
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(results)
            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop has closed: nobody is waiting any more
                pass

        self.submit(queries, k, done, abandoned=future.cancelled)
        return await future

    def search_blocking(self, queries: Sequence[str], k: int, timeout: float | None = None) -> list[list[Passage]]:
        """Search from a plain thread (waits for the worker)."""
        finished = threading.Event()
        outcome: list[Any] = []

        def done(results: list[list[Passage]] | None, error: BaseException | None) -> None:
            outcome.extend([results, error])
            finished.set()

        self.submit(queries, k, done)
        if not finished.wait(timeout):
            raise TimeoutError(f"search not done after {timeout} s")
        if outcome[1] is not None:
            raise outcome[1]
        return outcome[0]

    def close(self) -> None:
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._worker.join(timeout=30)

    def _is_long(self, job: _Job) -> bool:
        return any(len(q) > self.long_query_chars for q in job.queries)

    def _next_batch(self) -> list[_Job]:
        """Short jobs waiting, up to batch_queries queries (a larger job alone, searched in
        chunks), oldest first unless the queue is congested; waits for one only while no long
        job is in progress. Long jobs join self._long; abandoned ones are dropped."""
        with self._ready:
            while not self._pending and not self._long and not self._closing:
                self._ready.wait()
            live = [job for job in self._pending if not job.abandoned()]
            self.dropped += len(self._pending) - len(live)
            self._long.extend(job for job in live if self._is_long(job))
            short = [job for job in live if not self._is_long(job)]
            congested = bool(short) and time.monotonic() - short[0].submitted > self.lifo_after_s
            jobs: list[_Job] = []
            total = 0
            for job in reversed(short) if congested else short:
                if jobs and total + job.size > self.batch_queries:
                    continue
                jobs.append(job)
                total += job.size
                if total >= self.batch_queries:
                    break
            taken = {id(job) for job in jobs}
            self._pending = deque(job for job in short if id(job) not in taken)
            self.lifo_batches += bool(jobs) and congested
            return jobs

    def _run(self) -> None:
        while True:
            jobs = self._next_batch()
            if jobs:
                self._serve(jobs)
            if self._long:
                self._step_long()
            if self._closing and not self._long and not self._pending:
                return


    def _serve(self, jobs: list[_Job]) -> None:
        """Search `jobs` together; when that fails, each alone, so that only the requests whose
        own search fails get the error (e.g. the one that returns a damaged corpus line)."""
        try:
            results = self._search(jobs)
        except BaseException as err:  # the worker lives on
            if len(jobs) == 1:
                jobs[0].done(None, err)
            else:
                for job in jobs:
                    self._serve([job])
            return
        for job, rows in zip(jobs, results):
            job.done(rows, None)

    def _step_long(self) -> None:
        """One query of the oldest long job."""
        job = self._long[0]
        if job.abandoned():
            self._long.popleft()
            self.dropped += 1
            return
        query = job.queries[len(job.rows)]
        try:
            job.rows.extend(self._search([_Job([query], job.k, job.done)])[0])
        except BaseException as err:
            self._long.popleft()
            job.done(None, err)
            return
        if len(job.rows) == job.size:
            self._long.popleft()
            job.done(job.rows, None)

    def _search(self, jobs: list[_Job]) -> list[list[list[Passage]]]:
        """Each distinct (query, k) searched once; jobs asking different k are searched apart,
        so every request gets exactly what a search of its own would give."""
        hits: dict[tuple[str, int], list[Passage]] = {}
        for k in dict.fromkeys(job.k for job in jobs):
            distinct = list(dict.fromkeys(q for job in jobs if job.k == k for q in job.queries))
            for start in range(0, len(distinct), self.batch_queries):
                chunk = distinct[start:start + self.batch_queries]
                hits.update(((q, k), rows) for q, rows in zip(chunk, self.retriever.search(chunk, k)))
                self.batches += 1
        self.queries_served += sum(job.size for job in jobs)
        return [[hits[(q, job.k)] for q in job.queries] for job in jobs]


def describe(batcher: MicroBatcher | None) -> dict[str, Any]:
    if batcher is None:
        return {"batching": False}
    return {"batching": True, "batch_queries": batcher.batch_queries, "waiting_requests": batcher.waiting,
            "encoder_batches": batcher.batches, "queries_served": batcher.queries_served,
            "abandoned_requests_dropped": batcher.dropped, "newest_first_batches": batcher.lifo_batches}
