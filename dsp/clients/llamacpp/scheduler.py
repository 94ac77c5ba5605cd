"""The decode loop that every caller of one `LlamaCpp` shares: KV streams, prompt reuse, batched steps.

Callers, in any thread, hand in jobs: draws to generate for a prompt (`generate`), or a task that needs
the prompt in the KV cache to itself for a moment (`run_with_prompt`, e.g. scoring options). One caller
at a time drives: it admits jobs, puts their prompts in streams, and then decodes one token of every
running draw per step, in llama.cpp batches of up to `width` draws, until its own job is done; then a
waiting caller whose job is unfinished takes over (no background thread to start, stop or leak). Each
batch's draws are sampled on several threads (`NativeModel.sample_many`).

Why batching changes no answer: every draw runs in a KV stream of its own and no batch is wider than
the measured exact width (see `native.py`), its prompt gets there as a lone request's would (the same
aligned chunks, or a copy of a stream holding that prompt), and its sampler is seeded per request; so
neither the batch it shares nor the calls before it change a bit of its logits, and a draw gives the
same tokens batched, alone, or in another thread.

Design notes (the why):

- A stream remembers its prompt and that prompt's final logits: the same prompt again (n draws, a
  retry) costs a trim, a prompt another stream holds costs a stream copy, and otherwise the stream
  sharing the most whole aligned chunks (copied first when it is busy) evaluates the rest (see the
  client's notes on aligned chunks): concurrent calls whose prompts share demonstrations still reuse them.
  `prompt == []` means "contents unknown": it is set before any change and restored after it, so an
  error or interrupt half-way never leaves a stream that claims a prompt it does not hold.
- Jobs are admitted first come, first served; draws wait for a free stream; a finished draw's stream
  goes to the next one at once (the batch refills as draws stop at their own stop strings).
- A failed decode fails the jobs whose draws were in it (llama.cpp restores its cache; the streams are
  forgotten anyway). An interrupt (KeyboardInterrupt) in the driving thread ends that thread's job and
  puts the other callers' unfinished draws back to start over (same seeds, so the same answers).

The examples here need a loaded model (`native`), so they are shown as code, not run as doctests::

    scheduler = Scheduler(native, chunk=256)
    [r["choices"][0]["text"] for r in scheduler.generate(ids, [request, {**request, "seed": 1}])]
    # [' Paris', ' Lyon']
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Mapping, Sequence

from .draw import Draw
from .native import NativeModel

__all__ = ["Scheduler"]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class _Stream:
    """One KV stream (llama.cpp sequence `seq`): the prompt its first cells hold, and who uses it."""

    __slots__ = ("seq", "prompt", "logits", "draw", "used")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.prompt: list[int] = []  # [] = nothing known: wipe before use
        self.logits: Any = None      # after the prompt's last token
        self.draw: Draw | None = None
        self.used = 0                # when it was last given out (least recently used goes first)


class _Job:
    """What one caller waits for: draws for a prompt, or a task run with the prompt in a stream."""

    __slots__ = ("ids", "draws", "waiting", "task", "result", "error", "finished", "left", "cancelled")

    def __init__(self, ids: list[int], draws: Sequence[Draw] = (), task: Callable[[int, Any], Any] | None = None):
        self.ids = ids
        self.draws = list(draws)
        for draw in self.draws:
            draw.owner = self
        self.waiting: deque[Draw] = deque(self.draws)  # not started yet
        self.task = task
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = False
        self.left = 1 if task is not None else len(self.draws)  # work items not done yet
        self.cancelled = False  # its caller stopped waiting (interrupted): drop it


class Scheduler:
    """Runs draws and prompt tasks for many threads on one `NativeModel` (see the module notes).

    For example (with a loaded model, so not run here)::

        scheduler = Scheduler(native, chunk=256, width=native.exact_width(16))
        scheduler.run_with_prompt(ids, lambda seq, logits: int(logits.argmax()))    # 9259
    """

    def __init__(self, native: NativeModel, chunk: int, width: int = 1) -> None:
        self._native = native
        self._chunk = chunk
        self._width = max(1, width)  # most draws per llama.cpp call (NativeModel.exact_width)
        self._streams = [_Stream(seq) for seq in range(native.n_seq)]
        self._cond = threading.Condition()
        self._jobs: deque[_Job] = deque()  # unfinished, first come first served
        self._driving = False
        self._running: list[Draw] = []     # draws holding a stream
        self._clock = 0
        self._closing = False

    # -- what callers use ----------------------------------------------------------------------------

    def generate(self, ids: list[int], requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """One response per request (single draws of the prompt `ids`), decoded together with whatever
        else is running.

        For example, ``scheduler.generate(ids, [request])[0]["choices"][0]["text"]`` is ``' Paris'``.
        """
        job = _Job(ids, [Draw(request, len(ids)) for request in requests])
        self._run(job)
        return [draw.response for draw in job.draws]

    def run_with_prompt(self, ids: list[int], task: Callable[[int, Any], Any]) -> Any:
        """`task(seq, prompt_logits)`, run while KV sequence `seq` holds the prompt `ids` for it alone;
        whatever the task decodes after the prompt is dropped afterwards.

        For example, ``scheduler.run_with_prompt(ids, lambda seq, logits: float(logits.max()))`` is the
        prompt's top next-token logit (``17.2``).
        """
        job = _Job(ids, task=task)
        self._run(job)
        return job.result

    def forget_all(self) -> None:
        """Empty the KV cache and forget every stream's prompt (waits until nothing runs).

        For example, ``scheduler.forget_all()`` before the next prompt, when no stream's prompt is worth
        keeping.
        """
        with self._cond:
            while self._driving or self._jobs:
                self._cond.wait()
            self._native.kv_clear()
            for stream in self._streams:
                stream.prompt, stream.logits = [], None

    def close(self) -> None:
        """Refuse new jobs and wait for the running ones (then the model may be freed).

        For example, ``scheduler.close()`` before ``native.close()``.
        """
        with self._cond:
            self._closing = True
            while self._driving or self._jobs:
                self._cond.wait()

    # -- driving ------------------------------------------------------------------------------------

    def _run(self, job: _Job) -> None:
        with self._cond:
            if self._closing:
                raise RuntimeError("this LlamaCpp was closed")
            self._jobs.append(job)
            try:
                while not job.finished and self._driving:
                    self._cond.wait()
            except BaseException:  # interrupted while another thread drives: nobody wants this job now
                job.cancelled = True
                if not self._driving:  # nobody else can start driving while this thread holds the lock
                    self._drop_cancelled()
                raise
            drive = not job.finished
            if drive:
                self._driving = True
        if drive:
            try:
                while not job.finished:
                    self._iterate()
            except BaseException as error:  # an interrupt (a decode error fails jobs, see _iterate)
                self._abandon(job, error)
                raise
            finally:
                with self._cond:
                    self._driving = False
                    self._cond.notify_all()
        if job.error is not None:
            raise job.error

    def _iterate(self) -> None:
        """Admit what fits, then one step: every running draw gets its next token (the new ones from
        their prompt's logits, the others from a decode of their last token, `width` per batch)."""
        self._drop_cancelled()
        fresh = self._admit()
        stepping = [draw for draw in self._running if draw.prompt_logits is None]
        if fresh:
            self._sample(fresh, [d.prompt_logits for d in fresh])
        for start in range(0, len(stepping), self._width):
            batch = [d for d in stepping[start:start + self._width] if d.stream is not None]
            if not batch:  # all of a job that failed in an earlier batch of this step
                continue
            try:
                self._native.decode_step([d.tokens[-1] for d in batch], [d.position for d in batch],
                                         [d.stream for d in batch])
            except Exception as error:
                self._fail(batch, error)
                continue
            for draw in batch:
                draw.position += 1
            self._sample(batch, list(range(len(batch))))

    def _sample(self, batch: list[Draw], sources: list[Any]) -> None:
        """Sample each draw's next token from its source (kept logits, or a row of the last decode)."""
        native = self._native
        try:
            tokens = native.sample_many([d.chain for d in batch], sources)
            for draw, token, source in zip(batch, tokens, sources):
                draw.prompt_logits = None
                logits = None if draw.k is None else source if not isinstance(source, int) else native.logits(source)
                if not draw.take(native, token, logits):
                    self._finish(draw)
        except Exception as error:
            self._fail([d for d in batch if d.stream is not None], error)

    def _admit(self) -> list[Draw]:
        """Give free streams to waiting work, first come first served; returns the draws started."""
        fresh: list[Draw] = []
        with self._cond:
            jobs = list(self._jobs)
        for job in jobs:
            while not job.finished and (job.waiting or (job.task is not None and job.left)):
                place = self._free_stream(job.ids)
                if place is None:
                    return fresh  # later jobs wait their turn
                stream, source = place
                self._clock += 1
                stream.used = self._clock
                try:
                    logits = self._prepare(stream, source, job.ids)
                    if job.task is not None:
                        result = job.task(stream.seq, logits)
                        if not self._native.kv_remove_from(len(job.ids), stream.seq):
                            self._forget(stream)
                        self._done(job, result=result)
                        break
                except Exception as error:
                    self._forget(stream)
                    self._fail([], error, job)
                    break
                except BaseException:
                    self._forget(stream)  # interrupted mid-prompt or mid-task: contents unknown
                    raise
                draw = job.waiting.popleft()
                draw.begin(self._native, stream.seq)
                draw.prompt_logits = logits
                stream.draw = draw
                self._running.append(draw)
                fresh.append(draw)
        return fresh

    # -- streams ------------------------------------------------------------------------------------

    def _free_stream(self, ids: list[int]) -> tuple[_Stream, _Stream | None] | None:
        """Where prompt `ids` is served cheapest: (a free stream, a stream to copy into it first, or None).
        A free stream holding `ids` needs a trim; a stream elsewhere holding it, a copy; otherwise the
        stream (free or running: its prompt cells stay put) sharing the most whole aligned chunks with
        `ids` is copied unless a free one shares as many. A copy costs a memcpy of the stream, a few
        tokens' worth of evaluation; the least recently used free stream takes it."""
        free = [s for s in self._streams if s.draw is None]
        if not free:
            return None
        for stream in free:
            if stream.prompt == ids:
                return stream, None
        spare = min(free, key=lambda s: s.used)
        holder = next((s for s in self._streams if s.prompt == ids), None)
        if holder is not None:
            return spare, holder
        here = max(free, key=lambda s: (self._reusable(s.prompt, ids), -s.used))
        best = max(self._streams, key=lambda s: self._reusable(s.prompt, ids))
        if self._reusable(best.prompt, ids) > self._reusable(here.prompt, ids):
            return spare, best
        return here, None

    def _reusable(self, held: list[int], ids: list[int]) -> int:
        """How many leading tokens of `ids` a stream holding `held` keeps: whole aligned chunks only."""
        chunk = self._chunk
        keep = min(_common_prefix(held, ids), len(held) // chunk * chunk) // chunk * chunk
        if keep >= len(ids):  # the last chunk is decoded again to get its logits
            keep = (len(ids) - 1) // chunk * chunk
        return keep

    def _prepare(self, stream: _Stream, source: _Stream | None, ids: list[int]) -> Any:
        """Make `stream` hold exactly the prompt `ids` (copying `source` first, when given); returns the
        logits after its last token."""
        native = self._native
        if source is not None:
            stream.prompt, stream.logits = [], None
            native.kv_copy(source.seq, stream.seq)  # cells and all: the copy is bit for bit the original
            stream.prompt, stream.logits = source.prompt, source.logits  # shared, never changed in place
        if stream.prompt == ids and stream.logits is not None:
            if native.kv_remove_from(len(ids), stream.seq):  # drop the last draw's tokens
                return stream.logits
        return self._evaluate(stream, ids)

    def _evaluate(self, stream: _Stream, ids: list[int]) -> Any:
        """Evaluate `ids` in `stream` in chunks aligned from position 0, reusing the whole aligned chunks
        it already holds: the same chunks are always decoded the same way, whatever ran before."""
        native, seq, chunk = self._native, stream.seq, self._chunk
        keep = self._reusable(stream.prompt, ids)
        stream.prompt, stream.logits = [], None
        if keep == 0 or not native.kv_remove_from(keep, seq):
            keep = 0
            if not native.kv_remove_from(0, seq):
                raise RuntimeError(f"llama.cpp could not empty KV sequence {seq}")
        for start in range(keep, len(ids), chunk):
            part = ids[start:start + chunk]
            native.decode(part, start, "last" if start + len(part) == len(ids) else "none", seq)
        logits = native.logits(-1).copy()
        stream.prompt, stream.logits = list(ids), logits
        return logits

    def _forget(self, stream: _Stream) -> None:
        stream.prompt, stream.logits = [], None
        self._native.kv_remove_from(0, stream.seq)

    # -- endings ------------------------------------------------------------------------------------

    def _release(self, draw: Draw) -> _Stream:
        stream = self._streams[draw.stream]
        stream.draw = None
        self._running.remove(draw)
        draw.end(self._native)
        return stream

    def _finish(self, draw: Draw) -> None:
        self._release(draw)
        job = draw.owner
        job.left -= 1
        if not job.left:
            self._done(job)

    def _done(self, job: _Job, result: Any = None, error: BaseException | None = None) -> None:
        with self._cond:
            job.result, job.error, job.finished = result, error, True
            job.waiting.clear()
            if job in self._jobs:
                self._jobs.remove(job)
            self._cond.notify_all()

    def _fail(self, draws: Sequence[Draw], error: Exception, job: _Job | None = None) -> None:
        """Something went wrong for `draws` (or `job`): their jobs fail with `error`, and every stream
        their draws hold is forgotten (its contents are in doubt)."""
        jobs = {id(d.owner): d.owner for d in draws}
        if job is not None:
            jobs[id(job)] = job
        for failed in jobs.values():
            for draw in failed.draws:
                if draw.stream is not None:
                    self._forget(self._release(draw))
            self._done(failed, error=error)

    def _drop_cancelled(self) -> None:
        """Release the draws of jobs whose callers stopped waiting (call as the driver, or with the lock
        held and nobody driving)."""
        with self._cond:
            cancelled = [job for job in self._jobs if job.cancelled]
        for job in cancelled:
            for draw in job.draws:
                if draw.stream is not None:
                    self._release(draw)
            self._done(job, error=RuntimeError("the caller stopped waiting"))

    def _abandon(self, own: _Job, error: BaseException) -> None:
        """The driver was interrupted: its job ends with `error`; other unfinished draws start over."""
        restarted: dict[int, _Job] = {}
        for draw in list(self._running):
            stream = self._release(draw)
            stream.prompt, stream.logits = [], None  # maybe mid-change: wiped before any reuse
            if draw.owner is not own:
                draw.reset()
                draw.owner.waiting.append(draw)
                restarted[id(draw.owner)] = draw.owner
        for job in restarted.values():  # restarted draws keep their order within each job
            job.waiting = deque(sorted(job.waiting, key=job.draws.index))
        self._done(own, error=error)
