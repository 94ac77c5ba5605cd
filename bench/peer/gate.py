"""The column's gate: one fixed loopback port in front of the LM server and the RM server, for both systems.

    python bench/peer/gate.py --port 18800 --lm http://127.0.0.1:41001 [--lm http://127.0.0.1:41003] \
        --rm http://127.0.0.1:41002

- ``/lm/...`` goes to the LM server (``/lm/v1/completions`` -> ``/v1/completions``), with the generation
  policy (config.GENERATION, plus the sampling settings below) filled into any request that lacks a
  value: the same policy for dsp and for DSPy, whatever each client sends by default; with
  ``--merge-system`` (Gemma) a chat request's system message is rendered as the model's own template
  does, at the start of the first user message; with several ``--lm`` servers of one model, each
  generation goes to the one whose last prompt shares the longest prefix with it (`PrefixRouter`), one
  generation at a time, as one server would run them;
- ``/rm/...`` goes to the RM server (``dsp serve``: ``/rm/api/search`` -> ``/api/search``);
- ``GET /gate/stats``: what reached the servers (LM requests, prompt and completion tokens as the LM
  server counted them, RM searches, which defaults were filled in how often) -- the same meter for both
  systems, read before and after a compile to give its cost;
- ``GET /gate/health``;
- with ``--replay-dir DIR``, ``/replay/NAME/lm/...`` is ``/lm/...`` with its generations kept in
  ``DIR/NAME.jsonl`` (`ReplayLog`: JSON lines of request digest and response, appended as each answer
  arrives): a request that file holds is answered from it and reaches no server. DSPy's compiles call
  the LM there (`replay_base`): DSPy's own cache holds pickled objects and is never committed, so without
  this a compile stopped on one machine (a random search outlasts a sitting) would start again from
  nothing on the next; with it, the committed log answers the calls already paid for and the compile
  goes on from there. Replayed answers are counted apart (``lm_replayed``), never as requests or tokens.

Why a gate: the URLs a dsp results file records (and its cache keys) hold the port, so they must not
change between invocations of run.sh, while the servers behind it may start on any free port; and the
llama.cpp server's own defaults (temperature 0.8, top-k 40, a repeat penalty, 16 tokens) would apply to
whatever a client leaves out. Why several LM servers: llama.cpp's server keeps one prompt's state and
reuses the longest prefix the next prompt shares with it; DSPy, when its ChatAdapter's answer does not
parse, asks again through its JSONAdapter (other instructions before the same demos), so one server
evaluates both prompts whole on every such question. Two servers, each kept on one family, reuse the
demos on both (bench/bench_serve_cache.py measures it, and that the answers do not change). Standard
library only.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from config import GENERATION  # noqa: E402  (this folder on the path: run as a script)

__all__ = ["POLICY", "REPLAY_SUFFIX", "Gate", "PrefixRouter", "ReplayLog", "fill_policy", "merge_system",
           "prompt_text", "replay_base", "replay_file", "request_key", "shared_prefix", "main"]

# What a request that names none of them runs with: config.GENERATION, and the sampling settings of the
# project's embedded client (dsp.LlamaCpp: no top-k, top-p or min-p cut, no repeat penalty), so a
# greedy answer through the server is the embedded model's greedy answer.
POLICY: dict[str, Any] = {**GENERATION, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
_GENERATION_PATHS = ("/v1/completions", "/v1/chat/completions")
_TIMEOUT = 600.0  # seconds: a long prompt on 2 busy cores is slow, but a hung server must not hang a run
_REPLAY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")  # a file name in the replay folder, no path
REPLAY_SUFFIX = ".jsonl"  # a replay log's file: its name and this
_DIGEST = re.compile(r"[0-9a-f]{64}")


def fill_policy(body: dict[str, Any]) -> list[str]:
    """Fill `body` (a completion request) with the policy's values for the keys it lacks; return those keys.

    A client's own value stays: dsp's sampled calls keep their temperature, DSPy's its token limit.
    DSPy sends its limit as OpenAI's newer ``max_completion_tokens``, which llama.cpp's server ignores
    (a chat request would then generate until the context is full): it becomes ``max_tokens``, counted
    as "max_completion_tokens->max_tokens".

    >>> body = {"prompt": "Q:", "temperature": 0.3}
    >>> fill_policy(body), body["temperature"], body["max_tokens"]
    (['max_tokens', 'top_p', 'top_k', 'min_p', 'repeat_penalty'], 0.3, 150)
    >>> body = {"messages": [], "temperature": 0.0, "max_completion_tokens": 150}
    >>> fill_policy(body)[0], body["max_tokens"]
    ('max_completion_tokens->max_tokens', 150)
    """
    filled = []
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is not None:
        body["max_tokens"] = body.pop("max_completion_tokens")
        filled.append("max_completion_tokens->max_tokens")
    missing = [key for key in POLICY if body.get(key) is None]
    for key in missing:
        body[key] = POLICY[key]
    return filled + missing


def merge_system(body: dict[str, Any]) -> bool:
    """Move a chat request's leading system message to the start of its first user message (the system
    text, a blank line, then the user's), as Gemma 3's own chat template renders a system turn; return
    whether there was one. For a server whose chat format would drop it (llama-cpp-python's "gemma").

    >>> body = {"messages": [{"role": "system", "content": "Format: A."}, {"role": "user", "content": "Q?"}]}
    >>> merge_system(body), body["messages"]
    (True, [{'role': 'user', 'content': 'Format: A.\\n\\nQ?'}])
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict) \
            or messages[0].get("role") != "system" or not isinstance(messages[0].get("content"), str):
        return False
    system, rest = messages[0]["content"], list(messages[1:])
    for i, message in enumerate(rest):
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
            rest[i] = {**message, "content": f"{system}\n\n{message['content']}"}
            break
    else:
        rest.insert(0, {"role": "user", "content": system})
    body["messages"] = rest
    return True


def prompt_text(body: dict[str, Any]) -> str:
    """What a generation request asks the model to read, as one string whose prefixes follow the rendered
    prompt's: the completion prompt, or the chat messages' roles and contents in order.

    >>> prompt_text({"prompt": "Q: a"}), prompt_text({"messages": [{"role": "user", "content": "Q"}]})
    ('Q: a', 'user\\x1fQ\\x1e')
    """
    if "messages" in body:
        messages = body["messages"] if isinstance(body["messages"], list) else []
        return "".join(f"{m.get('role')}\x1f{m.get('content')}\x1e" if isinstance(m, dict) else f"{m}\x1e"
                       for m in messages)
    prompt = body.get("prompt")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def shared_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of `a` and `b` (a binary search over slice comparisons:
    prompts run to tens of thousands of characters).

    >>> shared_prefix("demos, then Q1", "demos, then Q2"), shared_prefix("", "x")
    (13, 0)
    """
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class PrefixRouter:
    """Which of `n` LM servers (one model, one setting) reads a prompt: the one whose last prompt shares the
    longest prefix with it (ties: the least recently used); but a prompt sharing less than `reuse` of
    itself with every server goes to a server not used yet, if there is one. Two prompt families
    alternating (DSPy's ChatAdapter, then its JSONAdapter on the same demos) so settle on a server each,
    and a run of one family stays on one server, as on a single server.

    >>> router = PrefixRouter(2)
    >>> [router.route(t) for t in ("chat: demos Q1", "json: demos Q1", "chat: demos Q2", "json: demos Q2")]
    [0, 1, 0, 1]
    >>> router.route("chat: other demos Q3"), router.route("json: other demos Q3")
    (0, 1)
    """

    def __init__(self, n: int, reuse: float = 0.5) -> None:
        self.last: list[str | None] = [None] * n  # None: not used yet
        self.used = [0] * n
        self.reuse = reuse
        self.clock = 0

    def route(self, text: str) -> int:
        """The server for `text`; it is then that server's last prompt (call in the order they run)."""
        shared = [-1 if last is None else shared_prefix(last, text) for last in self.last]
        unused = [i for i, last in enumerate(self.last) if last is None]
        if unused and max(shared) < self.reuse * len(text):
            chosen = unused[0]
        else:
            chosen = max(range(len(shared)), key=lambda i: (shared[i], -self.used[i]))
        self.clock += 1
        self.last[chosen], self.used[chosen] = text, self.clock
        return chosen


def replay_base(gate: str, name: str) -> str:
    """The OpenAI-style base URL (``.../v1``) of the LM at the gate `gate` whose generations are kept in,
    and answered again from, the replay log `name`.

    >>> replay_base("http://127.0.0.1:18800", "nq-test-dspy-rtr_predict-rs-chat-seed0.compile-replay")
    'http://127.0.0.1:18800/replay/nq-test-dspy-rtr_predict-rs-chat-seed0.compile-replay/lm/v1'
    """
    return f"{gate}/replay/{_replay_name(name)}/lm/v1"


def replay_file(folder: Path, name: str) -> Path:
    """The file the replay log `name` is kept in under `folder` (the gate's ``--replay-dir``, or a results
    folder that carries the log to another machine).

    >>> replay_file(Path("runs/peer/gemma/nq/dspy"), "nq-test-dspy-rtr_predict-rs-chat-seed0.compile-replay").name
    'nq-test-dspy-rtr_predict-rs-chat-seed0.compile-replay.jsonl'
    """
    return folder / f"{_replay_name(name)}{REPLAY_SUFFIX}"


def _replay_name(name: str) -> str:
    if not _REPLAY_NAME.fullmatch(name):
        raise ValueError(f"replay log name {name!r}: letters, digits, '.', '_' and '-' only")
    return name


def request_key(path: str, body: dict[str, Any]) -> str:
    """The digest a replay log files a generation under: the upstream path and the request as the server
    gets it (the policy filled in, a system message merged), keys sorted; the same request, the same key.

    >>> request_key("/v1/completions", {"prompt": "Q", "max_tokens": 9}) == \\
    ...     request_key("/v1/completions", {"max_tokens": 9, "prompt": "Q"})
    True
    """
    canonical = json.dumps({"path": path, "body": body}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ReplayLog:
    """The LM's answers to one client's generations, kept as they arrive: a JSON-lines file of
    ``{"key": request_key(...), "response": {...}}``, read whole (every line checked) when opened.

    Appending a line is one write, flushed; a last line cut short by a kill (no newline after it) is
    dropped when the log is next opened, and the next answer is written in its place. A file from elsewhere
    is data: anything but such lines is refused, naming the file and the line, before it is used.

    >>> import tempfile; path = Path(tempfile.mkdtemp()) / "unit.jsonl"
    >>> log = ReplayLog(path); log.put("a" * 64, {"choices": [{"text": "Paris"}]})
    >>> _ = path.open("a").write('{"key": "b')  # killed mid-line
    >>> again = ReplayLog(path); again.get("a" * 64), again.get("b" * 64), len(again)
    ({'choices': [{'text': 'Paris'}]}, None, 1)
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        self.answers, complete = ReplayLog.parse(text, str(path))
        if complete != text:
            with path.open("r+b") as file:
                file.truncate(len(complete.encode("utf-8")))

    @staticmethod
    def parse(text: str, source: str) -> tuple[dict[str, dict[str, Any]], str]:
        """A log's answers by key, and its whole lines (`text` less a last line cut short); anything but
        replay records is refused, naming `source` and the line.

        >>> ReplayLog.parse('{"key": "%s", "response": {}}\\n{"ke' % ("0" * 64), "unit.jsonl")[0]
        {'0000000000000000000000000000000000000000000000000000000000000000': {}}
        >>> ReplayLog.parse("[]\\n", "unit.jsonl")
        Traceback (most recent call last):
        ValueError: unit.jsonl: line 1 is not a replay record ({"key": <sha256 hex>, "response": {...}})
        """
        answers: dict[str, dict[str, Any]] = {}
        complete = text[:text.rfind("\n") + 1]  # whole lines; what follows the last newline was cut short
        for number, line in enumerate(complete.splitlines(), start=1):
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not (isinstance(record, dict) and set(record) == {"key", "response"}
                    and isinstance(record["key"], str) and _DIGEST.fullmatch(record["key"])
                    and isinstance(record["response"], dict)):
                raise ValueError(f"{source}: line {number} is not a replay record "
                                 '({"key": <sha256 hex>, "response": {...}})')
            answers[record["key"]] = record["response"]
        return answers, complete

    def __len__(self) -> int:
        return len(self.answers)

    def get(self, key: str) -> dict[str, Any] | None:
        with self.lock:
            return self.answers.get(key)

    def put(self, key: str, response: dict[str, Any]) -> None:
        line = json.dumps({"key": key, "response": response}, ensure_ascii=False) + "\n"
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as file:
                file.write(line)
                file.flush()
            self.answers[key] = response


class Gate(ThreadingHTTPServer):
    """The gate's server: upstream addresses, the router over the LM servers, and counters."""

    daemon_threads = True

    def __init__(self, port: int, lm: str | list[str], rm: str, merge_system: bool = False,
                 replay_dir: Path | None = None) -> None:
        lms = [lm] if isinstance(lm, str) else list(lm)
        if not lms:  # before binding the port, which a refused gate would otherwise leave open
            raise ValueError("Gate: no LM server given (--lm)")
        super().__init__(("127.0.0.1", port), _Handler)
        self.upstream = {"rm": urlsplit(rm), **{f"lm{i}": urlsplit(url) for i, url in enumerate(lms)}}
        self.merge_system = merge_system
        self.replay_dir = replay_dir
        self.replays: dict[str, ReplayLog] = {}
        self.lock = threading.Lock()
        # One generation at a time over all the LM servers: a single server runs them one by one, and two
        # llama.cpp servers computing at once on the same cores would only slow each other down.
        self.generating = threading.Lock()
        self.router = PrefixRouter(len(lms))
        self.stats: dict[str, Any] = {"lm_requests": 0, "lm_errors": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                      "lm_seconds": 0.0, "lm_replayed": 0, "rm_requests": 0, "rm_errors": 0, "filled": {},
                                      "lm_servers": [0] * len(lms), "started": time.time()}
        self.local = threading.local()

    def connection(self, which: str) -> http.client.HTTPConnection:
        """This thread's keep-alive connection to an upstream server."""
        key = f"conn_{which}"
        conn = getattr(self.local, key, None)
        if conn is None:
            target = self.upstream[which]
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=_TIMEOUT)
            setattr(self.local, key, conn)
        return conn

    def drop(self, which: str) -> None:
        conn = getattr(self.local, f"conn_{which}", None)
        if conn is not None:
            conn.close()
            setattr(self.local, f"conn_{which}", None)

    def replay(self, name: str) -> ReplayLog:
        """The replay log `name` (opened, and checked, on first use)."""
        if self.replay_dir is None:
            raise ValueError(f"a request asks for replay log {name!r}, but this gate keeps none (--replay-dir)")
        path = replay_file(self.replay_dir, name)
        with self.lock:
            if name not in self.replays:
                self.replays[name] = ReplayLog(path)
            return self.replays[name]

    def count(self, **values: Any) -> None:
        with self.lock:
            for key, value in values.items():
                if key == "filled":
                    for name in value:
                        self.stats["filled"][name] = self.stats["filled"].get(name, 0) + 1
                elif key == "server":
                    self.stats["lm_servers"][value] += 1
                else:
                    self.stats[key] += value


class _Handler(BaseHTTPRequestHandler):
    server: Gate
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        """Quiet: thousands of requests a run."""

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: Any) -> None:
        self._reply(status, json.dumps(payload).encode("utf-8"))

    def do_GET(self) -> None:  # noqa: N802 (the base class's name)
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def _route(self, method: str) -> None:
        path = self.path
        if path.startswith("/gate/stats"):
            with self.server.lock:
                self._json(200, json.loads(json.dumps(self.server.stats)))
            return
        if path.startswith("/gate/health"):
            self._json(200, {"status": "ok"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""  # read before any refusal: the connection is kept
        replay: ReplayLog | None = None
        if path.startswith("/replay/"):
            name, _, path = path.removeprefix("/replay/").partition("/")
            try:
                replay = self.server.replay(name)
            except (ValueError, OSError) as error:
                self._json(400, {"error": f"gate: {error}"})
                return
            path = "/" + path
        which, _, rest = path.lstrip("/").partition("/")
        if which not in ("lm", "rm") or (replay is not None and which != "lm"):
            self._json(404, {"error": f"no route {self.path!r}: /lm/..., /rm/..., /replay/NAME/lm/..., /gate/stats"})
            return
        upstream_path = "/" + rest
        filled: list[str] = []
        request: Any = None
        generation = which == "lm" and method == "POST" and upstream_path.split("?")[0] in _GENERATION_PATHS
        if generation:
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                self._json(400, {"error": "the request body is not JSON"})
                return
            if isinstance(request, dict):
                filled = fill_policy(request)
                if self.server.merge_system and merge_system(request):
                    filled.append("system->first user message")
                body = json.dumps(request).encode("utf-8")
        key = ""
        if not (generation and isinstance(request, dict)):
            replay = None  # only generations are kept (a model listing goes through as it is)
        if replay is not None:
            key = request_key(upstream_path, request)
            answer = replay.get(key)
            if answer is not None:
                self.server.count(lm_replayed=1)
                self._json(200, answer)
                return
        headers = {"Content-Type": self.headers.get("Content-Type") or "application/json",
                   "Content-Length": str(len(body))}
        started = time.perf_counter()
        if generation:
            with self.server.generating:
                server = self.server.router.route(prompt_text(request) if isinstance(request, dict) else "")
                status, payload, content_type = self._forward(f"lm{server}", method, upstream_path, body, headers)
        else:
            server = None
            status, payload, content_type = self._forward("lm0" if which == "lm" else which, method,
                                                          upstream_path, body, headers)
        if which == "rm":
            self.server.count(rm_requests=1, rm_errors=int(status >= 400))
        else:
            usage: dict[str, Any] = {}
            if status < 400 and content_type.startswith("application/json"):
                try:
                    usage = json.loads(payload).get("usage") or {}
                except (ValueError, AttributeError):
                    usage = {}
            self.server.count(lm_requests=int(generation), lm_errors=int(status >= 400),
                              prompt_tokens=int(usage.get("prompt_tokens") or 0),
                              completion_tokens=int(usage.get("completion_tokens") or 0),
                              lm_seconds=time.perf_counter() - started, filled=filled)
            if server is not None:
                self.server.count(server=server)
            if replay is not None and status == 200:
                try:
                    answer = json.loads(payload)
                except ValueError:
                    answer = None
                if isinstance(answer, dict):
                    replay.put(key, answer)
        self._reply(status, payload, content_type)

    def _forward(self, which: str, method: str, path: str, body: bytes,
                 headers: dict[str, str]) -> tuple[int, bytes, str]:
        """(status, body, content type) from the upstream server; one reconnect if a kept-alive
        connection was closed under us before the request went out, else a 502 (never a second
        generation of a request the server may have started: the client's own retry decides)."""
        for attempt in (1, 2):
            conn = self.server.connection(which)
            try:
                conn.request(method, path, body=body or None, headers=headers)
                response = conn.getresponse()
                return response.status, response.read(), response.getheader("Content-Type") or "application/json"
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as error:
                self.server.drop(which)
                failure: Exception = error
                if attempt == 2:
                    break
            except (http.client.HTTPException, OSError) as error:
                self.server.drop(which)
                failure = error
                break
        message = json.dumps({"error": f"gate: the {which.rstrip('0123456789').upper()} server "
                                       f"({self.server.upstream[which].netloc}) "
                                       f"did not answer: {failure}"})
        return 502, message.encode("utf-8"), "application/json"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="the gate's fixed loopback port")
    parser.add_argument("--lm", required=True, action="append",
                        help="an LM server, http://127.0.0.1:PORT; repeat it for several servers of one model")
    parser.add_argument("--rm", required=True, help="the RM server (dsp serve), http://127.0.0.1:PORT")
    parser.add_argument("--merge-system", action="store_true",
                        help="move a chat request's system message into its first user message (config.Model)")
    parser.add_argument("--replay-dir", type=Path,
                        help="where the replay logs of /replay/NAME/lm/... are kept")
    args = parser.parse_args(argv)
    gate = Gate(args.port, args.lm, args.rm, merge_system=args.merge_system, replay_dir=args.replay_dir)
    print(f"gate on http://127.0.0.1:{args.port}: /lm -> {' '.join(args.lm)}, /rm -> {args.rm}; policy {POLICY}; "
          f"system messages {'merged into the first user message' if args.merge_system else 'as sent'}", flush=True)
    gate.serve_forever()


if __name__ == "__main__":
    main()
