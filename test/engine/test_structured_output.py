"""Structured output (xgrammar): every constrained output parses and obeys its constraint, with
batching, the overlapped loop, preemption, prefix caching and sampling; bad constraints are
rejected by name."""

from __future__ import annotations

import json
import re
from concurrent.futures import Future

import jsonschema
import pytest

from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.sampling_params import SamplingParams, StructuredOutput
from mstar.engine.structured.structured_output import check_structured_output


def _obj(props: dict, required: list[str] | None = None) -> dict:
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else required}


def _str(n: int) -> dict:
    return {"type": "string", "maxLength": n}


def _int(lo: int, hi: int) -> dict:
    return {"type": "integer", "minimum": lo, "maximum": hi}


# (what to describe, its schema): bounded strings, numbers and arrays, so greedy output ends.
SCHEMAS = [
    ("a person", _obj({"name": _str(12), "age": _int(0, 120)})),
    ("a favourite colour", _obj({"color": {"enum": ["red", "green", "blue"]}})),
    ("whether it rains and how many clouds", _obj({"raining": {"type": "boolean"},
                                                    "clouds": _int(0, 9)})),
    ("a postal address", _obj({"address": _obj({
        "street": _str(20), "city": _str(15),
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}})})),
    ("three fruits", _obj({"fruits": {"type": "array", "items": _str(10),
                                      "minItems": 1, "maxItems": 3}})),
    ("some digits", _obj({"digits": {"type": "array", "items": _int(0, 9),
                                     "minItems": 2, "maxItems": 4}})),
    ("the temperature in Paris", _obj({"celsius": {"type": "number", "minimum": -50,
                                                   "maximum": 50}})),
    ("an HTTP response", _obj({"status": {"enum": ["ok", "error"]}, "code": _int(100, 599)})),
    ("a shopping list", _obj({"items": {"type": "array", "minItems": 1, "maxItems": 2,
                                        "items": _obj({"name": _str(8), "qty": _int(1, 10)})}})),
    ("a product id", _obj({"id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}})),
    ("a book", _obj({"title": _str(20), "subtitle": _str(20)}, required=["title"])),
    ("a middle name or null", _obj({"middle": {"type": ["string", "null"], "maxLength": 10}})),
    ("a nested value", _obj({"a": _obj({"b": _obj({"c": _int(0, 5)})})})),
    ("whether the sky is blue", _obj({"answer": {"type": "boolean"}})),
    ("a difficulty level", _obj({"level": {"enum": [1, 2, 3]}})),
    ("a date", _obj({"year": _int(1900, 2100), "month": _int(1, 12), "day": _int(1, 31)})),
    ("a score or a grade", _obj({"value": {"anyOf": [_int(0, 100), _str(5)]}})),
    ("tags for a photo", _obj({"tags": {"type": "array", "maxItems": 3,
                                        "items": {"enum": ["sea", "sky", "sun"]}}})),
    ("three words", {**_obj({"first": _str(6), "second": _str(6), "third": _str(6)}),
                     "additionalProperties": False}),
    ("the location of Paris", _obj({"lat": {"type": "number", "minimum": -90, "maximum": 90},
                                    "lon": {"type": "number", "minimum": -180, "maximum": 180}})),
]
PERSON = _obj({"name": _str(10), "age": _int(0, 99)})
PHONE = r"\+1-[0-9]{3}-[0-9]{3}-[0-9]{4}"
SUM_GRAMMAR = 'root ::= num " + " num " = " num\nnum ::= [0-9] | [1-9] [0-9]'
CHOICES = ["apple pie", 'car "fast"', "été"]


def _schema(schema: dict) -> StructuredOutput:
    return StructuredOutput(kind="json_schema", spec=json.dumps(schema))


def _greedy(so: StructuredOutput | None, max_tokens: int = 80) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, structured_output=so)


# ---- the built-in model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm(builtin_cache_dir):
    """The built-in model with the default loop (overlapped) and prefix caching on."""
    from mstar import LLM

    return LLM(cache_dir=str(builtin_cache_dir), device="cpu", max_model_len=512,
               num_kv_blocks=256, enable_prefix_caching=True)


def _ask(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def test_constrained_and_free_requests_in_one_batch(llm):
    """20 JSON schemas, a regex, choices, an EBNF grammar, any JSON object, four sampled requests
    of one schema and two free requests: one batch, every output obeys its constraint."""
    jobs = [(_ask(f"Describe {what} as JSON."), _greedy(_schema(s))) for what, s in SCHEMAS]
    jobs += [
        (_ask("What is your phone number?"), _greedy(StructuredOutput(kind="regex", spec=PHONE))),
        (_ask("Is Paris in France? Answer yes or no."),
         _greedy(StructuredOutput(kind="choice", choices=["yes", "no"]))),
        (_ask("Which is a fruit?"), _greedy(StructuredOutput(kind="choice", choices=CHOICES))),
        (_ask("Add two small numbers."),
         _greedy(StructuredOutput(kind="grammar", spec=SUM_GRAMMAR))),
        (_ask("What is 2 + 2? Reply in JSON."),
         _greedy(StructuredOutput(kind="json_object"), max_tokens=120)),
        (_ask("What is the capital of France?"), _greedy(None, max_tokens=24)),
        (_ask("Write a haiku about the sea."), _greedy(None, max_tokens=24)),
    ]
    jobs += [(_ask("Describe a person as JSON."),
              SamplingParams(temperature=1.0, seed=seed, max_tokens=60,
                             structured_output=_schema(PERSON))) for seed in range(4)]
    outs = llm.chat([conv for conv, _ in jobs], [p for _, p in jobs])
    *schema_outs, phone, yes_no, fruit, arithmetic, anything, paris, haiku = outs[:-4]
    for (what, schema), out in zip(SCHEMAS, schema_outs, strict=True):
        assert out.finish_reason == "stop", (what, out.text)
        jsonschema.validate(json.loads(out.text), schema)
    assert re.fullmatch(PHONE, phone.text) and phone.finish_reason == "stop"
    assert yes_no.text in ("yes", "no") and fruit.text in CHOICES
    assert re.fullmatch(r"\d+ \+ \d+ = \d+", arithmetic.text)
    assert isinstance(json.loads(anything.text), dict) and anything.finish_reason == "stop"
    assert "Paris" in paris.text and haiku.finish_reason == "length"
    sampled = [json.loads(out.text) for out in outs[-4:]]
    for person in sampled:
        jsonschema.validate(person, PERSON)
    assert len({json.dumps(p) for p in sampled}) > 1  # the seeds give different people


def test_prefix_cache_hit_keeps_constrained_output(llm, run):
    """The same constrained chat twice: the second hits the prefix cache, same tokens."""
    what, schema = SCHEMAS[1]
    prompt = list(llm.tokenizer.apply_chat_template(
        _ask(f"Describe {what} as JSON."), add_generation_prompt=True, tokenize=True,
        return_dict=False))
    params = _greedy(_schema(schema))
    first = run(llm.engine, {"a": (prompt, params)})["a"]
    second = run(llm.engine, {"a": (prompt, params)})["a"]
    assert second["cached_tokens"] > 0
    assert second["token_ids"] == first["token_ids"]
    jsonschema.validate(json.loads(second["text"]), schema)


def test_llm_rejects_a_bad_schema_and_runs_nothing_of_the_call(llm):
    good = _greedy(StructuredOutput(kind="choice", choices=["yes", "no"]), max_tokens=4)
    bad = _greedy(StructuredOutput(kind="json_schema", spec='{"type": "objekt"}'))
    with pytest.raises(RequestRejected, match="objekt") as err:
        llm.generate(["Is the sea blue?", "Is grass green?"], [good, bad])
    assert err.value.param == "response_format"
    assert not llm.engine.has_unfinished_requests()  # the good one did not stay queued
    assert llm.generate("Is the sea blue? Answer yes or no.", good)[0].text in ("yes", "no")


# ---- tiny random models: the loop mechanics -----------------------------------------------------

# Every path through this schema is short, so even a random model's greedy output ends in it.
RECORD = _obj({"id": _int(0, 99), "tag": {"enum": ["a", "bb", "ccc"]}, "ok": {"type": "boolean"},
               "name": _str(4)})
TINY_TEXTS = ["The quick brown fox", "Paris is the capital", "def add(a, b):", "Numbers: 0 1 2",
              "Hello world!"]


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_dir):
    return tiny_model_dir("llama")


@pytest.fixture(scope="module")
def tiny(tiny_dir, make_engine):
    """A tiny engine with the overlapped loop and room for every request at once."""
    return make_engine(tiny_dir, kv_block_size=4, num_kv_blocks=256,
                       max_consecutive_spec_steps=1024)


def _tokens(results: dict) -> dict:
    return {rid: r["token_ids"] for rid, r in results.items()}


def _tiny_jobs(tiny_tokenizer, **params) -> dict:
    so = _schema(RECORD)
    jobs = {f"c{i}": (tiny_tokenizer.encode(t), SamplingParams(
        temperature=0, max_tokens=60, structured_output=so, **params))
        for i, t in enumerate(TINY_TEXTS)}
    jobs["free"] = (tiny_tokenizer.encode(TINY_TEXTS[0]),
                    SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    return jobs


def _check_records(results: dict) -> None:
    for rid, r in results.items():
        if rid != "free":
            assert r["finish_reason"] == "stop", r
            jsonschema.validate(json.loads(r["text"]), RECORD)


def test_serial_and_overlapped_loops_agree(tiny, tiny_dir, tiny_tokenizer, make_engine, run):
    """Constrained requests that end at different steps (the overlapped loop wastes a row of each
    finished one, whose grammar has terminated) give the same tokens in both loops. With
    ignore_eos, a constrained request still ends where its grammar does."""
    jobs = _tiny_jobs(tiny_tokenizer, ignore_eos=True, frequency_penalty=0.5, min_tokens=3)
    serial = run(make_engine(tiny_dir, kv_block_size=4, num_kv_blocks=256,
                             max_consecutive_spec_steps=0), jobs)
    before = tiny.loop.counters.continuations
    overlapped = run(tiny, jobs)
    assert tiny.loop.counters.continuations > before
    assert _tokens(overlapped) == _tokens(serial)
    _check_records(overlapped)
    assert len({r["text"] for r in overlapped.values()}) > 2  # not one degenerate output


def test_constrained_requests_survive_preemption(tiny, tiny_dir, tiny_tokenizer, make_engine,
                                                 run):
    """A KV cache too small for all requests at once: preempted constrained requests resume with
    their grammar and token counts intact (the same tokens as without preemption)."""
    jobs = _tiny_jobs(tiny_tokenizer, presence_penalty=0.5)
    roomy = run(tiny, jobs)
    engine = make_engine(tiny_dir, kv_block_size=4, num_kv_blocks=20,
                         enable_prefix_caching=False)
    for rid, (prompt, params) in jobs.items():
        engine.add_request(rid, prompt, params)
    results = run(engine, {})
    assert engine.scheduler.num_preemptions > 0
    assert _tokens(results) == _tokens(roomy)
    _check_records(results)


class ScriptedExecutor:
    """Runs no compile itself: each submit returns the next of ``futures``, which the test
    completes (or leaves pending) as it likes; ``calls`` keeps what each submit asked for."""

    def __init__(self, futures) -> None:
        self.futures = iter(futures)
        self.calls: list[tuple] = []

    def submit(self, fn, *args) -> Future:
        self.calls.append((fn, *args))
        return next(self.futures)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


@pytest.fixture()
def scripted_grammars(monkeypatch):
    """``install(engine, futures, **settings) -> ScriptedExecutor``: the engine's grammars
    compile on a ``ScriptedExecutor`` (bounds from its settings with ``settings`` changed) for
    the test."""
    from mstar.engine.structured.grammar_pool import GrammarBounds, GrammarCompilePool

    def install(engine, futures, **settings) -> ScriptedExecutor:
        executor = ScriptedExecutor(futures)
        bounds = GrammarBounds.from_settings(engine.settings.model_copy(update=settings))
        monkeypatch.setattr(engine, "grammars", GrammarCompilePool(
            engine.tokenizer, engine.vocab_size, sorted(engine.eos_token_ids), bounds,
            executor=executor))
        return executor

    return install


def test_scheduler_admits_a_request_only_once_its_grammar_compiled(tiny, tiny_tokenizer, run,
                                                                   scripted_grammars):
    spec = StructuredOutput(kind="choice", choices=["a"])
    slow: Future = Future()
    executor = scripted_grammars(tiny, [slow])
    prompt = tiny_tokenizer.encode(TINY_TEXTS[0])
    tiny.add_request("slow", prompt, _greedy(spec))
    tiny.add_request("free", prompt, _greedy(None, max_tokens=5))
    finished = []
    for _ in range(50):  # "free" runs to its end while "slow" waits for its grammar
        finished += [out.request_id for out in tiny.step() if out.finished]
    assert finished == ["free"]
    assert tiny.stats().waiting == 1 and tiny.stats().running == 0
    [(compile_, asked)] = executor.calls
    slow.set_result(compile_(asked))  # the compile ends now
    done = run(tiny, {})
    assert done["slow"]["text"] == "a" and done["slow"]["finish_reason"] == "stop"


def test_a_grammar_that_fails_to_compile_aborts_only_its_request(tiny, tiny_tokenizer, run,
                                                                 scripted_grammars):
    engine = tiny
    failed: Future = Future()
    failed.set_exception(RuntimeError("out of memory"))
    scripted_grammars(engine, [failed])
    prompt = tiny_tokenizer.encode(TINY_TEXTS[0])
    results = run(engine, {"bad": (prompt, _greedy(StructuredOutput(kind="json_object"))),
                           "free": (prompt, _greedy(None, max_tokens=5))})
    assert results["bad"]["finish_reason"] == "abort" and results["bad"]["token_ids"] == []
    assert results["free"]["finish_reason"] is not None
    [(rid, error)] = engine.take_rejected()  # what the worker answers: a 400 naming the field
    assert rid == "bad" and error.status == 400 and error.param == "response_format"
    assert "out of memory" in str(error)


def test_a_compile_past_its_budget_fails_with_408_and_a_queued_one_is_cancelled(
        tiny, tiny_tokenizer, run, scripted_grammars):
    engine = tiny
    running: Future = Future()
    running.set_running_or_notify_cancel()  # begun: xgrammar cannot be interrupted
    queued: Future = Future()
    scripted_grammars(engine, [running, queued], grammar_compile_timeout_s=0.05)
    prompt = tiny_tokenizer.encode(TINY_TEXTS[0])
    spec = StructuredOutput(kind="regex", spec="[a-z]+")
    results = run(engine, {"slow": (prompt, _greedy(spec)), "queued": (prompt, _greedy(spec)),
                           "free": (prompt, _greedy(None, max_tokens=5))})
    assert results["slow"]["finish_reason"] == "abort"
    assert results["queued"]["finish_reason"] == "abort"
    assert results["free"]["finish_reason"] == "length"
    rejected = dict(engine.take_rejected())
    assert {rejected["slow"].status, rejected["queued"].status} == {408}
    assert rejected["slow"].param == "guided_regex"
    assert queued.cancelled() and not running.cancelled()


def test_an_abort_cancels_a_queued_compile(tiny, tiny_tokenizer, scripted_grammars):
    queued: Future = Future()
    scripted_grammars(tiny, [queued])
    tiny.add_request("gone", tiny_tokenizer.encode(TINY_TEXTS[0]),
                     _greedy(StructuredOutput(kind="json_object")))
    tiny.abort_request("gone")
    assert queued.cancelled() and not tiny.has_unfinished_requests()


# ---- bad constraints --------------------------------------------------------------------------

BAD = [
    (StructuredOutput(kind="json_schema", spec='{"type": "objekt"}'), "json_schema", "objekt",
     "response_format"),
    (StructuredOutput(kind="regex", spec="a(b"), "regex", "parenthesis", "guided_regex"),
    (StructuredOutput(kind="grammar", spec='root ::= "a" |'), "grammar", "EBNF",
     "guided_grammar"),
    (StructuredOutput(kind="grammar", spec='start ::= "a"'), "grammar", "root",
     "guided_grammar"),
]


@pytest.mark.parametrize(("spec", "kind", "detail", "field"), BAD,
                         ids=["schema", "regex", "ebnf", "no-root"])
def test_bad_constraints_are_named(spec, kind, detail, field, tiny, tiny_tokenizer, run):
    with pytest.raises(ValueError, match=f"invalid {kind}: .*{detail}"):
        check_structured_output(spec)
    engine = tiny
    prompt = tiny_tokenizer.encode(TINY_TEXTS[0])
    with pytest.raises(RequestRejected, match=detail) as err:
        engine.grammars.check(spec)
    assert err.value.param == field
    bad = run(engine, {"bad": (prompt, _greedy(spec))})  # checked in the pool: never on the loop
    assert bad["bad"]["finish_reason"] == "abort"
    [(_, error)] = engine.take_rejected()
    assert error.status == 400 and error.param == field and re.search(detail, str(error))
    ok = run(engine, {"bad": (prompt, _greedy(StructuredOutput(kind="choice", choices=["a"])))})
    assert ok["bad"]["text"] == "a"  # the engine and the request id are still usable


def test_good_constraints_pass_the_check():
    for spec in (StructuredOutput(kind="json_object"), _schema(RECORD),
                 StructuredOutput(kind="regex", spec=PHONE),
                 StructuredOutput(kind="choice", choices=CHOICES),
                 StructuredOutput(kind="grammar", spec=SUM_GRAMMAR)):
        check_structured_output(spec)
