"""`dsp.evaluate(..., runner=dsp.evaluation.Ray(...))`: a dev set's examples as Ray tasks on a cluster.

The driver (the process calling `dsp.evaluate`) splits the examples still to run into batches and
submits each batch as a Ray task. A task runs its examples `num_threads` at a time with
`dsp.evaluation.rows.run_example`, the function the thread runner uses, and returns their rows; the
driver collects finished batches with `ray.wait` and writes each row to the JSONL, the progress bar and
the result as it arrives, so resuming, summaries and the file format are those of the thread runner.

What travels to a worker, and what does not:

- The program and the metric, by cloudpickle: importable functions and `functools.partial`s of plain
  data go by reference (the code must be installed on every node). A program that holds a live client
  (an LM, RM or vectorizer object, with its sockets and API key) is refused before anything is sent.
- The LM and RM as their text specs (`client.spec`, set by `dsp.clients.specs.lm_from_spec` /
  `rm_from_spec`); each worker process rebuilds each spec once and reuses it for later tasks. A client
  without a spec is an error that names it. API keys come from the workers' own environment.
- The cache choice (`cache`, the Redis URL without its password, or an explicit cache directory, and the
  write mode `cache_write`: a worker commits "deferred" entries before its batch returns),
  `branch_idx`, `lm_overrides` and $DSP_DATA_DIR / $DSP_MODEL_DIR (a worker's own values win).

Fault tolerance: a task whose worker process or node dies is retried by Ray (`max_retries`); the
examples it had finished are recomputed from the cache (every LM and RM call is cached), so a rerun
costs little and nothing is lost. A batch whose retries all fail is recorded as failed rows, which a
rerun of the evaluation retries, as it does any failed example. An error in the task machinery itself
(a spec that cannot be built, a program that cannot be imported) stops the evaluation with that error.
The driver keeps a window of tasks in flight (`WINDOW_PER_CPU` per CPU of the cluster), never the
whole dev set, and cancels none: after an interrupt or an error the window's batches finish on the
cluster and their calls land in the cache, which a rerun replays. (Ray 2.60 aborts the driver when
`ray.cancel` meets a task whose result is arriving.)

Concurrency: each task runs `num_threads` examples at a time (the per-worker bound) and takes one
CPU of the cluster, so a node runs as many tasks as it has CPUs. `global_concurrency` caps the LM
requests in flight across all workers with one `ConcurrencyLimit` actor: a worker takes a slot before
each real LM request (cache hits take none) and gives it back after. Slots are leases, renewed every
few seconds while held, so a slot held by a worker that was killed returns to the pool once its lease
runs out instead of shrinking the limit for good. (A semaphore rather than a token bucket: a server's
capacity is a number of parallel requests, and a killed worker cannot leak a rate.)

For example (it needs the [scale] extra and a cluster, so it is shown, not run as a doctest)::

    dsp.evaluate(program, dev, runner=Ray(address="auto", threads=4, global_concurrency=16),
                 out="runs/rtr.jsonl")
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import io
import itertools
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from ..cache import cache_enabled, cache_url, cache_write_mode
from ..cache import flush as flush_cache
from ..clients.lm import LM
from ..clients.rm import RM
from ..clients.specs import lm_from_spec, parse_spec, rm_from_spec, with_options
from ..clients.vectorizers import Vectorizer
from ..example import Example
from ..settings import settings
from .fields import Fields
from .rows import failed_row, metric_caller, run_example

if TYPE_CHECKING:
    from .runners import Job

__all__ = ["run_on_ray", "connect", "dumps_program", "ConcurrencyLimit", "LiveClientError",
           "MAX_RETRIES", "LEASE_SECONDS", "FORWARDED_ENV", "WINDOW_PER_CPU"]

MAX_RETRIES = 3        # Ray re-runs a task this many times after its worker or node dies
LEASE_SECONDS = 60.0   # a global-concurrency slot not renewed for this long is taken back
FORWARDED_ENV = ("DSP_DATA_DIR", "DSP_MODEL_DIR")  # paths only: credentials never leave the driver


class LiveClientError(TypeError):
    """A program sent to Ray workers holds a live client; clients travel as specs, never pickled."""


def _ray() -> Any:
    """The ray module, imported on first use (this module loads without it: its doctests, its errors)."""
    try:
        import ray
    except ImportError:
        raise ImportError('the Ray runner needs Ray: pip install "dsp[scale]" (ray and redis)') from None
    return ray


# -- what the driver sends ---------------------------------------------------------------------------

def dumps_program(obj: Any) -> bytes:
    """cloudpickle `obj` (a program and its metric), refusing any live LM, RM or vectorizer inside it.

    For example (Ray's cloudpickle comes with the [scale] extra, so not run as a doctest)::

        blob = dumps_program((functools.partial(open_qa.vanilla, train=train), dsp.EM))
        dumps_program(lambda q: lm(q))   # lm: a client object in the caller's scope
        # LiveClientError: the program holds a live client, LlamaCpp(model='gemma-3-270m-q4_k_m.gguf'), ...
    """
    _ray()
    from ray import cloudpickle

    class _Pickler(cloudpickle.CloudPickler):
        def reducer_override(self, value: Any) -> Any:
            if isinstance(value, (LM, RM, Vectorizer)):
                raise LiveClientError(
                    f"the program holds a live client, {value!r}, which cannot be sent to Ray workers (its "
                    f"connections and API key stay here). Read it from dsp.settings inside the program; the "
                    f"workers rebuild settings.lm and settings.rm from their specs.")
            return super().reducer_override(value)

    buffer = io.BytesIO()
    try:
        _Pickler(buffer).dump(obj)
    except LiveClientError:
        raise
    except Exception as error:  # pickling fails in many ways (locks, sockets, generators): name the cause
        raise TypeError(f"the program cannot be sent to Ray workers ({type(error).__name__}: {error}); describe it "
                        f"as an importable function, or a functools.partial of one with plain-data arguments") from None
    return buffer.getvalue()


def _spec_of(client: Any, what: str) -> str | None:
    if client is None:
        return None
    spec = client.spec if isinstance(client, (LM, RM)) else None
    if not isinstance(spec, str) or not spec.strip():
        builder = "lm_from_spec" if what == "LM" else "rm_from_spec"
        raise ValueError(
            f"the Ray backend rebuilds the {what} on every worker from its spec, and {client!r} has none. Build it "
            f"with dsp.clients.specs.{builder}(...) (e.g. 'llamacpp', 'openai-compatible:http://host:8000/v1,model=NAME', "
            f"'bm25:passages.jsonl.gz', 'colbertv2:http://host:8893/api/search', 'replay:file.jsonl') or set its "
            f".spec to one that rebuilds it.")
    return spec


@dataclass(frozen=True)
class _Job:
    """Everything a batch task needs besides the pickled program and its examples (plain data only)."""

    lm_spec: str | None
    rm_spec: str | None
    cache: bool
    cache_url: str | None
    cache_dir: str | None
    cache_write: str
    env: Mapping[str, str]
    branch_idx: Any
    lm_overrides: Mapping[str, Any] | None
    seed: int | None
    fields: Fields
    num_threads: int
    limit: Any = None      # a ConcurrencyLimit actor handle (a handle names the actor; it holds no connection)
    limit_key: str = ""    # names that limit in a worker's table of leases


def _job(*, seed: int | None, fields: Fields, num_threads: int, limit: Any) -> _Job:
    """The driver's settings as a job description (raises for clients that cannot travel)."""
    for name in ("vectorizer", "reranker"):
        if getattr(settings, name) is not None:
            raise ValueError(f"settings.{name} is set, and the Ray backend cannot rebuild it on the workers (it has no "
                             f"spec); use the Threads runner or set it inside the program")
    url = cache_url()
    if url is not None:
        from ..cache.redis import strip_password

        url = strip_password(url)  # workers read a password from their own $DSP_CACHE_PASSWORD
    chosen_dir = settings.cache_dir or os.environ.get("DSP_CACHEDIR")
    return _Job(
        lm_spec=_spec_of(settings.lm, "LM"), rm_spec=_spec_of(settings.rm, "RM"), cache=cache_enabled(),
        cache_url=url, cache_dir=str(chosen_dir) if chosen_dir else None, cache_write=cache_write_mode(),
        env={k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)},
        branch_idx=settings.branch_idx, lm_overrides=dict(settings.lm_overrides) if settings.lm_overrides else None,
        seed=seed, fields=fields, num_threads=num_threads, limit=limit,
    )


# -- the global concurrency limit ------------------------------------------------------------------

class ConcurrencyLimit:
    """At most `limit` leases out at once; a lease not renewed within `lease_seconds` is taken back.

    Run as a Ray actor (`ray.remote(ConcurrencyLimit)`); async, so hundreds of waiting `acquire` calls
    cost no threads.

    >>> import asyncio
    >>> limit = ConcurrencyLimit(1)
    >>> asyncio.run(limit.acquire()), asyncio.run(limit.stats())["in_flight"]
    (1, 1)
    """

    def __init__(self, limit: int, lease_seconds: float = LEASE_SECONDS) -> None:
        self.limit = int(limit)
        self.lease_seconds = float(lease_seconds)
        self._held: dict[int, float] = {}  # lease -> deadline (monotonic)
        self._next = 0
        self._cond = asyncio.Condition()
        self._peak = self._granted = self._expired = 0

    def _expire(self, now: float) -> None:
        for lease, deadline in list(self._held.items()):
            if deadline <= now:
                del self._held[lease]
                self._expired += 1

    async def acquire(self) -> int:
        async with self._cond:
            while True:
                now = time.monotonic()
                self._expire(now)
                if len(self._held) < self.limit:
                    self._next += 1
                    self._held[self._next] = now + self.lease_seconds
                    self._granted += 1
                    self._peak = max(self._peak, len(self._held))
                    return self._next
                # Wake on a release, or when the oldest lease would lapse (its holder may be dead).
                timeout = max(min(self._held.values()) - now, 0.01)
                try:
                    await asyncio.wait_for(self._cond.wait(), timeout)
                except asyncio.TimeoutError:
                    pass

    async def release(self, lease: int) -> None:
        async with self._cond:
            if self._held.pop(lease, None) is not None:
                self._cond.notify()

    async def renew(self, leases: Sequence[int]) -> None:
        async with self._cond:
            deadline = time.monotonic() + self.lease_seconds
            for lease in leases:
                if lease in self._held:
                    self._held[lease] = deadline

    async def stats(self) -> dict[str, int]:
        """limit, in_flight, peak (most leases out at once), granted, expired (taken back unrenewed)."""
        return {"limit": self.limit, "in_flight": len(self._held), "peak": self._peak, "granted": self._granted,
                "expired": self._expired}


class _Leases:
    """This worker process's leases on one ConcurrencyLimit, renewed in the background while any is held."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.held: set[int] = set()
        self.lock = threading.Lock()
        self.renewer: threading.Thread | None = None

    @contextmanager
    def slot(self) -> Iterator[None]:
        lease = _ray().get(self.actor.acquire.remote())
        with self.lock:
            self.held.add(lease)
            if self.renewer is None:
                self.renewer = threading.Thread(target=self._renew, name="dsp-lease-renewer", daemon=True)
                self.renewer.start()
        try:
            yield
        finally:
            with self.lock:
                self.held.discard(lease)
            # Waited for: when a task returns, its slots are back, so the driver may end the actor at once.
            _ray().get(self.actor.release.remote(lease))

    def _renew(self) -> None:
        while True:
            time.sleep(LEASE_SECONDS / 4)
            with self.lock:
                leases = sorted(self.held)
                if not leases:
                    self.renewer = None  # restarted by the next slot() (both under the lock)
                    return
            self.actor.renew.remote(leases)


_LEASES: dict[str, _Leases] = {}
_CURRENT_LEASES: contextvars.ContextVar[_Leases | None] = contextvars.ContextVar("dsp_ray_leases", default=None)


def _leases_for(actor: Any, key: str) -> _Leases:
    with _CLIENTS_LOCK:
        if key not in _LEASES:
            _LEASES[key] = _Leases(actor)
        return _LEASES[key]


def _limited(lm: LM) -> LM:
    """Make `lm`'s real requests (not its cache hits) take a global slot whenever the running task has one.

    Only clients this worker built for itself are wrapped; the limit in force is the current task's,
    read from a contextvar, so one client serves evaluations with and without a limit.
    """
    request = lm._request

    def limited_request(payload: dict[str, Any]) -> dict[str, Any]:
        leases = _CURRENT_LEASES.get()
        if leases is None:
            return request(payload)
        with leases.slot():
            return request(payload)

    lm._request = limited_request  # type: ignore[method-assign]
    return lm


# -- what a worker does ------------------------------------------------------------------------------

_CLIENTS: dict[tuple[str, str], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _fit_threads(spec: str) -> str:
    """An embedded-model spec sized to this task's CPUs: a node runs one task per CPU, and llama.cpp's
    default (every core) in each of them would oversubscribe the node many times over."""
    kind, _, options = parse_spec(spec)
    if kind != "llamacpp" or "n_threads" in options:
        return spec
    cpus = _ray().get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    return with_options(spec, n_threads=max(1, int(cpus)))


def _client(kind: str, spec: str | None) -> Any:
    if spec is None:
        return None
    key = (kind, spec)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            if kind == "lm":
                client = _limited(lm_from_spec(_fit_threads(spec)))
            else:
                client = rm_from_spec(spec)
            _CLIENTS[key] = client
        return client


def _run_batch(job: _Job, blob: bytes, items: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Run one batch on a worker and return its rows (in the batch's order)."""
    for name, value in job.env.items():
        os.environ.setdefault(name, value)
    from ray import cloudpickle

    program, metric = cloudpickle.loads(blob)
    score_of = metric_caller(metric)
    context = {"lm": _client("lm", job.lm_spec), "rm": _client("rm", job.rm_spec), "cache": job.cache,
               "cache_url": job.cache_url, "cache_dir": job.cache_dir, "cache_write": job.cache_write,
               "branch_idx": job.branch_idx,
               "lm_overrides": job.lm_overrides}
    def one(item: tuple[int, dict[str, Any]]) -> dict[str, Any]:
        index, example = item
        return run_example(program, Example(example), index, score_of, seed=job.seed, fields=job.fields)

    # A worker process runs task after task: this task's limit must not outlive it.
    token = _CURRENT_LEASES.set(_leases_for(job.limit, job.limit_key) if job.limit is not None else None)
    try:
        with settings.context(**context):
            if job.num_threads == 1 or len(items) == 1:
                return [one(item) for item in items]
            with ThreadPoolExecutor(min(job.num_threads, len(items))) as pool:
                # copy_context() runs here, in the task's thread: each example starts from the task's settings.
                futures = [pool.submit(contextvars.copy_context().run, one, item) for item in items]
                return [future.result() for future in futures]
    finally:
        _CURRENT_LEASES.reset(token)
        flush_cache()  # "deferred" writes: the batch's calls are stored before its rows reach the driver


_REMOTES: dict[str, Any] = {}


def _remote(name: str) -> Any:
    """The Ray remote function (`batch`) or actor class (`limit`), made once per process."""
    if name not in _REMOTES:
        ray = _ray()
        _REMOTES["batch"] = ray.remote(_run_batch)
        _REMOTES["limit"] = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(ConcurrencyLimit)
    return _REMOTES[name]


# -- the driver ----------------------------------------------------------------------------------------

WINDOW_PER_CPU = 2  # tasks in flight per cluster CPU: one running, one queued behind it
WINDOW_REFRESH_SECONDS = 10.0


class _Window:
    """How many batch tasks to keep in flight: enough to keep every CPU of the cluster busy (read again
    every few seconds, so nodes an autoscaler adds are used), few enough that a stop leaves little running."""

    def __init__(self, ray: Any) -> None:
        self.ray, self.size, self.read_at = ray, WINDOW_PER_CPU, -WINDOW_REFRESH_SECONDS

    def __call__(self) -> int:
        now = time.monotonic()
        if now - self.read_at >= WINDOW_REFRESH_SECONDS:
            cpus = int(self.ray.cluster_resources().get("CPU", 0))
            self.size, self.read_at = max(WINDOW_PER_CPU, WINDOW_PER_CPU * cpus), now
        return self.size


def connect(address: str | None = None) -> None:
    """Connect to the Ray cluster at `address` ("auto", "ray://host:10001", "host:6379"), or, when none is
    given and none is named by $RAY_ADDRESS, start a local one. An existing connection is reused.

    For example, ``connect("head-host:6380")`` joins a cluster started with ``ray start --head --port 6380``.
    """
    ray = _ray()
    if ray.is_initialized():
        return
    if address is None and not os.environ.get("RAY_ADDRESS"):
        ray.init(include_dashboard=False)
    else:
        ray.init(address=address)


def run_on_ray(
    evaluation: Job,
    todo: Sequence[int],
    *,
    on_row: Callable[[dict[str, Any]], Any],
    num_threads: int = 1,
    address: str | None = None,
    batch_size: int | None = None,
    global_concurrency: int | None = None,
) -> None:
    """Run `evaluation.examples[i]` for i in `todo` on Ray, calling `on_row(row)` in this thread as each
    arrives. The `Ray` runner calls this; see the module docstring for what travels where.

    For example (on a cluster, so not run as a doctest)::

        run_on_ray(Job(program, dsp.EM, dev, None, Fields()), range(len(dev)), on_row=print)
    """
    # First: a program holding a live client fails before any cluster work.
    blob = dumps_program((evaluation.program, evaluation.metric))
    examples, seed = evaluation.examples, evaluation.seed
    job = _job(seed=seed, fields=evaluation.fields, num_threads=num_threads, limit=None)
    ray = _ray()
    connect(address)
    limit = _remote("limit").remote(global_concurrency) if global_concurrency else None
    if limit is not None:
        job = dataclasses.replace(job, limit=limit, limit_key=uuid.uuid4().hex)
    # One wave of num_threads examples per task by default: small tasks stream rows back often, lose little
    # to a killed worker, and Ray hands the next queued task to whichever worker frees up first.
    size = batch_size or num_threads
    batches = [list(todo[k:k + size]) for k in range(0, len(todo), size)]
    task = _remote("batch").options(num_cpus=1, max_retries=MAX_RETRIES)
    pending: dict[Any, list[int]] = {}
    try:
        blob_ref = ray.put(blob)  # stored once in the object store, fetched once per worker node
        queued, window = iter(batches), _Window(ray)
        while True:
            # A window of tasks in flight, never the whole dev set: an interrupt or an error then leaves at
            # most a window of batches to finish on the cluster (their calls land in the cache), and no task
            # is cancelled. Ray 2.60's ray.cancel of a task whose reply is arriving aborts the driver
            # ("Tried to complete task that was not pending", ray-project/ray#54846's family).
            for batch in itertools.islice(queued, max(0, window() - len(pending))):
                pending[task.remote(job, blob_ref, [(i, dict(examples[i])) for i in batch])] = batch
            if not pending:
                break
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                batch = pending.pop(ref)
                try:
                    rows = ray.get(ref)
                except ray.exceptions.RayTaskError as error:
                    # The task's own code failed (not an example: those are caught and recorded in
                    # their rows): a client that cannot be built, a program that cannot be imported.
                    cause = error.cause if getattr(error, "cause", None) is not None else error
                    raise RuntimeError(f"a Ray task of the evaluation failed (examples {batch[0]}..{batch[-1]}): "
                                       f"{type(cause).__name__}: {cause}") from None
                except ray.exceptions.RayError as error:
                    # The worker or its node died on every retry: record the batch as failed (a rerun retries it).
                    message = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                    rows = [failed_row(examples[i], i, message, seed=seed, fields=evaluation.fields) for i in batch]
                for row in rows:
                    on_row(row)
    finally:
        if limit is not None and not pending:
            ray.kill(limit)  # else Ray ends it when the last task in flight, which holds a handle, ends
