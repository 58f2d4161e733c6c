"""The polling of ``jobs.results`` without its I/O: which jobs to ask about in each round, when a
job is done with, and how long to wait before the next round. The sync and async clients only
fetch and sleep as it says."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ._errors import APITimeoutError
from ._models import Job


class JobWatch:
    """Watches ``job_ids`` (each once, in order) until each has finished. ``clock`` gives
    seconds (``time.monotonic``); the ``timeout`` counts from when the watch is made."""

    def __init__(
        self,
        job_ids: Iterable[str],
        *,
        poll_interval: float,
        timeout: float | None,
        clock: Callable[[], float],
    ) -> None:
        self.pending = list(dict.fromkeys(job_ids))
        self._poll_interval = poll_interval
        self._timeout = timeout
        self._clock = clock
        self._deadline = None if timeout is None else clock() + timeout

    def round(self) -> list[str]:
        """The jobs to ask about now (a copy: a job finishing does not skip the next one)."""
        return list(self.pending)

    def finished(self, job_id: str, job: Job) -> bool:
        """Whether ``job``, the answer for ``job_id``, is to be handed out: it has finished,
        and it is no longer pending."""
        if job.finished:
            self.pending.remove(job_id)
        return job.finished

    def pause(self) -> float:
        """Seconds to wait before the next round; :class:`APITimeoutError` when the next round
        would start after the deadline."""
        if self._deadline is not None and self._clock() + self._poll_interval > self._deadline:
            raise APITimeoutError(f"jobs not finished in {self._timeout} s: {self.pending}")
        return self._poll_interval
