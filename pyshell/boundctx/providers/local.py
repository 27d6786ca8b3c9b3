"""Local models through llama-cpp-python: one process-wide lock, exact prompt tokens.

The prompt is never a string handed to llama-cpp-python to tokenize: it is the token
list :meth:`LlamaCounter.prompt_tokens` builds (decision 0007), so the count checked
against the window is the count evaluated, and text such as ``<|im_end|>`` inside a
message stays text. Every generation on any local model holds :data:`INFERENCE_LOCK`
from its first token to its last, so local calls never overlap, whichever thread makes
them; a caller can take the lock first, for the generations it makes next
(:meth:`LlamaCppProvider.turn`), and count the wait against its own clock.

A cancellation or a time limit stops prompt evaluation too: each loaded context has one
llama.cpp abort callback, which llama.cpp calls between the nodes of its compute graph
while the prompt is evaluated (``llama_decode`` then returns 2). On AMX hosts the model
is loaded without llama.cpp's extra buffer types (decision 0013, :mod:`.cpu`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from boundctx._llama_log import expect_abort
from boundctx.errors import GenerationError, GenerationTimeout, ResponseSchemaError
from boundctx.providers import cpu
from boundctx.providers.base import (
    ChatRequest,
    ChunkStream,
    Finish,
    FinishReason,
    Provider,
    TextChunk,
    finish_reason,
)
from boundctx.providers.grammar import checked_grammar, schema_grammar, unheld_keywords
from boundctx.providers.kept_state import StateCache

if TYPE_CHECKING:
    from boundctx.tokens.llama import LlamaCounter

__all__ = ["INFERENCE_LOCK", "LlamaCppProvider", "open_llama"]

#: Held by every generation on a local model in this process.
INFERENCE_LOCK = threading.Lock()

_log = logging.getLogger("boundctx.local")


@lru_cache(maxsize=1)
def _llama_cpp():
    # ImportError with the install hint; llama.cpp's log routed to boundctx.llama_cpp
    # before any load.
    from boundctx.tokens.llama import _llama_cpp as import_llama_cpp

    return import_llama_cpp()


@lru_cache(maxsize=1)
def _llama_class():
    """``llama_cpp.Llama`` that also sets llama.cpp's ``use_extra_bufts`` model parameter.

    llama-cpp-python 0.3.36's ``Llama()`` takes no argument for it: it builds
    ``self.model_params`` from ``llama_model_default_params()`` and loads the model from
    that struct within the same constructor. This subclass makes ``model_params`` a
    property whose setter sets the field on the struct as it is stored, so the one
    struct llama-cpp-python fills in, loads from and keeps (``llm.model_params``)
    carries the choice; nothing of llama-cpp-python is patched.
    """
    base = _llama_cpp().Llama

    class _Llama(base):
        def __init__(self, *args: Any, use_extra_bufts: bool, **kwargs: Any) -> None:
            self._use_extra_bufts = use_extra_bufts
            super().__init__(*args, **kwargs)

        @property
        def model_params(self):
            return self._model_params

        @model_params.setter
        def model_params(self, params) -> None:
            params.use_extra_bufts = self._use_extra_bufts
            self._model_params = params

    return _Llama


@lru_cache(maxsize=1)
def _no_abort():
    """A NULL abort callback (llama.cpp then never asks)."""
    import ctypes

    return ctypes.cast(None, _llama_cpp().ggml_abort_callback)


def _kept_prefix(llm, tokens) -> int:
    """Tokens at the start of ``tokens`` that llama-cpp-python will take from what
    ``llm`` holds instead of evaluating them: its own rule (``Llama.generate``, 0.3.x),
    the longest common start with the tokens it holds, less the last one when that is
    the whole prompt (evaluated again for fresh logits) unless the prompt is exactly
    what the last live decode left. Its array of held tokens is read directly: it has
    no public view of it."""
    n = int(llm.n_tokens)
    if n == 0 or not tokens:
        return 0
    held = llm._input_ids[:min(n, len(tokens))]
    diff = (held != np.asarray(tokens[:len(held)], dtype=held.dtype)).nonzero()[0]
    longest = int(diff[0]) if diff.size else len(held)
    if longest < len(tokens):
        return longest
    return longest if n == len(tokens) and not getattr(llm, "_requires_eval", True) else longest - 1


class _AbortGuard:
    """What the abort callback of a loaded context consults: the cancel event and the
    deadline of the stream being evaluated (none between streams).

    llama.cpp calls it from the thread that runs ``llama_decode`` (the stream's), with
    the GIL taken for each call. It never raises: an exception from the cancel event
    is kept and raised by the stream, and a KeyboardInterrupt (a SIGINT handler runs in
    the main thread's next Python code, which may be this callback) aborts the
    evaluation and is raised again once llama.cpp has returned.
    """

    def __init__(self) -> None:
        self.cancel: Any = None
        self.deadline: float | None = None
        self.armed = False
        #: None, or why the evaluation was aborted: "cancel", "timeout", "interrupt", "error".
        self.fired: str | None = None
        self.error: BaseException | None = None
        #: How often llama.cpp asked (diagnostics, and tests that must know that
        #: evaluation is under way).
        self.checks = 0

    def arm(self, cancel: Any, deadline: float | None) -> None:
        self.cancel, self.deadline, self.fired, self.error, self.armed = cancel, deadline, None, None, True

    def disarm(self) -> None:
        self.cancel, self.deadline, self.armed = None, None, False
        if self.fired is not None:
            expect_abort(False)

    def _fire(self, why: str) -> bool:
        self.fired = why
        expect_abort(True)  # llama.cpp's "failed to decode" lines that follow are what we asked for
        return True

    def __call__(self, _data: Any) -> bool:
        try:
            self.checks += 1
            if not self.armed:
                return False
            if self.fired is not None:
                return True
            if self.cancel is not None and self.cancel.is_set():
                return self._fire("cancel")
            if self.deadline is not None and time.monotonic() > self.deadline:
                return self._fire("timeout")
            return False
        except KeyboardInterrupt:
            return self._fire("interrupt")
        except Exception as exc:  # noqa: BLE001 - kept and raised by the stream, never lost
            self.error = exc
            return self._fire("error")


#: A held prefix is copied out to the state cache before a call would discard at least
#: this many of its evaluated tokens, and a kept one restored when it spares at least as
#: many: below that, evaluating the tokens again costs less than the copy (decision 0030).
KEEP_AT_LEAST = 32


#: Longest wait for another local generation to finish when a call has no time limit of
#: its own: a stream that is neither read to its end nor closed keeps the lock, and a
#: wait without end would hang every other local call.
LOCK_WAIT_S = 600.0


class _Turn:
    """A hold on :data:`INFERENCE_LOCK` taken by :meth:`LlamaCppProvider.turn`."""

    __slots__ = ("generating",)

    def __init__(self) -> None:
        #: A generation of this turn is running (a second one is refused meanwhile).
        self.generating = False


#: ``turn``: the :class:`_Turn` this thread holds, if any.
_held = threading.local()


@contextlib.contextmanager
def _hold_model(timeout_s: float | None) -> Iterator[None]:
    """Hold :data:`INFERENCE_LOCK`, waiting at most ``timeout_s`` (None: :data:`LOCK_WAIT_S`)."""
    wait = LOCK_WAIT_S if timeout_s is None else max(timeout_s, 0.0)
    if not INFERENCE_LOCK.acquire(timeout=wait):
        raise GenerationTimeout(
            f"another local generation held the model for {wait:g} s, so this one did not start; a stream "
            "that is neither read to its end nor closed keeps the model: close it (stream.close())")
    try:
        yield
    finally:
        INFERENCE_LOCK.release()


@contextlib.contextmanager
def _inference_turn(timeout_s: float | None) -> Iterator[float]:
    """Hold :data:`INFERENCE_LOCK` for one generation; yields when the wait began, so a
    time limit covers the wait as well as the generation. Inside this thread's
    :meth:`LlamaCppProvider.turn` the lock is held already: the generation starts at
    once, and another begun before it ends is refused."""
    began = time.monotonic()
    turn = getattr(_held, "turn", None)
    if turn is None:
        with _hold_model(timeout_s):
            yield began
        return
    if turn.generating:
        raise GenerationError("a local generation of this turn is still running, so this one did not start; "
                              "read the first stream to its end or close it (stream.close())")
    turn.generating = True
    try:
        yield began
    finally:
        turn.generating = False  # the turn object, not this thread's: a dropped stream may end elsewhere


def open_llama(model_path: str, *, extra_buffers: cpu.ExtraBuffersSetting = "auto", **llama_kwargs: Any):
    """A ``llama_cpp.Llama`` loaded with boundctx's extra-buffer-types decision, for code
    that needs llama-cpp-python's own API (its chat handler, its server) on any host,
    AMX ones included (decision 0013). ``llama_kwargs`` go to ``Llama()``."""
    decision = cpu.decide_extra_buffers(extra_buffers, cpu.cpu_flags())
    return _llama_class()(model_path=model_path, use_extra_bufts=decision.enabled, **llama_kwargs)


class LlamaCppProvider(Provider):
    """A GGUF model run in this process.

    Parameters
    ----------
    model_path : str, optional
        A GGUF file; default: ``local.model``, and when that is empty the embedded
        SmolLM2-135M-Instruct.
    n_ctx : int, optional
        The context window to open the model with (``chat.n_ctx``; llama-cpp-python's
        own default, 512, is never used).
    n_threads : int, optional
        CPU threads for inference (``local.threads``); 0: llama-cpp-python's choice
        (half the cores).
    n_gpu_layers : int, optional
        Model layers offloaded to a GPU by a GPU build of llama-cpp-python; -1 = all
        (``local.gpu_layers``; its default, 0, keeps everything on the CPU).
    seed : int, optional
        Sampling seed (``local.seed``).
    extra_buffers : {"auto", "on", "off"}, optional
        llama.cpp's extra buffer types (repacked and AMX weight layouts, model parameter
        ``use_extra_bufts``; ``local.extra_buffers``). ``auto``: off on hosts whose CPU
        has AMX, where llama-cpp-python 0.3.36 dies with SIGILL in its AMX kernels, on
        elsewhere (decision 0013).
    repeat_penalty : float, optional
        How much tokens already in the context are penalised, 1 = not at all
        (``chat.repeat_penalty``). Not applied under a JSON schema, where braces,
        quotes and keys must repeat.
    chat_template : str, optional
        A Jinja chat template instead of the model's own.
    state_cache_mib : int, optional
        Most MiB of evaluated prompt states kept for later calls (``local.state_cache_mib``;
        0: none). A long prefix the next call would throw away (another conversation's
        turn, a section worker between two replies) is copied out first, and a prompt
        that starts the same way later takes it back instead of evaluating it again
        (:attr:`state_cache`; decision 0030).
    settings : mapping, optional
        Where the options left out come from: resolved settings or a partial mapping
        (default :func:`boundctx.config.load`: the config file and ``BOUNDCTX_*``
        variables apply to the API as to the command line).

    Notes
    -----
    The model is loaded on the first call. A cancellation or a time limit interrupts
    prompt evaluation within a node of llama.cpp's compute graph (an abort callback),
    and generation at the next token; either way the stream ends as it would at a
    token (``Finish("cancelled")`` or :class:`~boundctx.errors.GenerationTimeout`) and the
    model stays usable: an interrupted evaluation is forgotten, so the next call
    evaluates its prompt from the start. The callback is attached only while a prompt
    is evaluated: each call takes the GIL, which per generated token (hundreds of
    graph nodes) would make generation wait on any busy Python thread. llama.cpp
    reuses the longest common token prefix with the previous prompt, so callers that
    keep a stable prefix (system prompt, instructions) save its evaluation; the state
    cache extends that to prefixes evaluated before the last call. A request made with
    ``keep_state=False`` (one-off work) leaves no state worth copying out.
    """

    name = "local"
    #: The chat template decides how tools are offered and called; nothing here can
    #: hold the model to a call ("none" is honoured by not offering them).
    supports_tool_choice = False
    counter: LlamaCounter
    #: Generations take turns on :data:`INFERENCE_LOCK`: callers that run tasks in
    #: parallel can wait for their turn first (:meth:`turn`) and count the wait against
    #: their clock.
    serialises = True

    def __init__(self, model_path: str | None = None, *, n_ctx: int | None = None, n_threads: int | None = None,
                 n_gpu_layers: int | None = None, seed: int | None = None,
                 extra_buffers: cpu.ExtraBuffersSetting | None = None, repeat_penalty: float | None = None,
                 chat_template: str | None = None, state_cache_mib: int | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        from boundctx import config
        from boundctx.tokens.llama import LlamaCounter

        s = config.resolve(settings)
        if model_path is None and s.local.model:
            model_path = os.path.expanduser(s.local.model)
        n_ctx = s.chat.n_ctx if n_ctx is None else n_ctx
        n_threads = s.local.threads if n_threads is None else n_threads
        n_gpu_layers = s.local.gpu_layers if n_gpu_layers is None else n_gpu_layers
        seed = s.local.seed if seed is None else seed
        extra_buffers = s.local.extra_buffers if extra_buffers is None else extra_buffers
        repeat_penalty = s.chat.repeat_penalty if repeat_penalty is None else repeat_penalty
        state_cache_mib = s.local.state_cache_mib if state_cache_mib is None else state_cache_mib

        if n_ctx < 16:
            raise ValueError(f"n_ctx must be >= 16, got {n_ctx}")
        if n_threads is not None and n_threads < 0:
            raise ValueError(f"n_threads must be >= 0 (0 = llama-cpp-python's choice), got {n_threads}")
        if n_gpu_layers < -1:
            raise ValueError(f"n_gpu_layers must be >= -1 (-1 = all), got {n_gpu_layers}")
        if state_cache_mib < 0:
            raise ValueError(f"state_cache_mib must be >= 0 (0 = no state cache), got {state_cache_mib}")
        #: The extra-buffer-types decision (:class:`~boundctx.providers.cpu.ExtraBuffers`).
        self.extra_buffers_decision = cpu.decide_extra_buffers(extra_buffers, cpu.cpu_flags())
        self.counter = LlamaCounter(model_path, chat_template=chat_template)
        self.model_path = self.counter.vocab.model_path
        # Tools reach the model only through its chat template; a template that never
        # mentions them (SmolLM2's) would drop them silently.
        template = self.counter.template
        self.supports_tools = template is not None and "tools" in template.source
        self.context_window = n_ctx
        self.n_threads = n_threads or None
        self.n_gpu_layers = n_gpu_layers
        self.seed = seed
        self.repeat_penalty = float(repeat_penalty)
        #: Evaluated prompt states kept for later calls (None: ``state_cache_mib`` is 0).
        self.state_cache = StateCache(state_cache_mib << 20) if state_cache_mib else None
        self._held_worth_keeping = False  # whether the last call asked for its state to be kept
        self._llm = None
        self._guard = _AbortGuard()
        self._abort_fn = None  # the ctypes callback of the loaded context (llama.cpp keeps only its address)
        self._load_lock = threading.Lock()

    @property
    def abort_checks(self) -> int:
        """How often llama.cpp has called this provider's abort callback (it does so
        between graph nodes while a prompt is evaluated)."""
        return self._guard.checks

    def load(self) -> None:
        """Load the model now (otherwise the first call does)."""
        self._model()

    def _model(self):
        with self._load_lock:
            if self._llm is None:
                llama_cpp = _llama_cpp()
                decision = self.extra_buffers_decision
                # Off: say what was done (-v). On against an AMX CPU (forced): a warning,
                # since that is the setting that crashes.
                level = (logging.INFO if not decision.enabled
                         else logging.WARNING if decision.amx else logging.DEBUG)
                _log.log(level, "%s", decision.reason)
                llm = _llama_class()(model_path=self.model_path, n_ctx=self.context_window,
                                     n_threads=self.n_threads, n_gpu_layers=self.n_gpu_layers, seed=self.seed,
                                     use_extra_bufts=decision.enabled, verbose=False)
                self._abort_fn = llama_cpp.ggml_abort_callback(self._guard)
                self._llm = llm
            return self._llm

    def _set_abort(self, llm, attached: bool) -> None:
        llama_cpp = _llama_cpp()
        fn = self._abort_fn if attached else _no_abort()
        llama_cpp.llama_set_abort_callback(llm.ctx, fn, None)

    @staticmethod
    def _forget_evaluation(llm) -> None:
        """After an aborted ``llama_decode``: drop what llama-cpp-python and the KV cache
        hold, so the next call evaluates its whole prompt (llama.cpp removes the
        aborted batch's cells itself, but nothing here relies on how much it kept)."""
        llama_cpp = _llama_cpp()
        llm.reset()  # n_tokens = 0: no prefix of input_ids is reused
        memory = llama_cpp.llama_get_memory(llm.ctx)
        if memory is not None:
            llama_cpp.llama_memory_clear(memory, True)

    @contextlib.contextmanager
    def turn(self, *, timeout_s: float | None = None) -> Iterator[None]:
        """Hold :data:`INFERENCE_LOCK` for the block (see :meth:`Provider.turn`): the
        block's generations, one after another in this thread, wait no more, and every
        other local generation waits for the block to end. ``timeout_s`` defaults to
        :data:`LOCK_WAIT_S`; a turn inside a turn of the same thread holds nothing more."""
        if getattr(_held, "turn", None) is not None:
            yield
            return
        with _hold_model(timeout_s):
            _held.turn = _Turn()
            try:
                yield
            finally:
                _held.turn = None

    def close(self) -> None:
        """Free the model (it is loaded again on the next call)."""
        held = getattr(_held, "turn", None) is not None  # this thread's turn holds the lock already
        with self._load_lock, contextlib.nullcontext() if held else INFERENCE_LOCK:
            if self._llm is not None:
                self._llm.close()
                self._llm = None
                self._abort_fn = None
            if self.state_cache is not None:
                self.state_cache.clear()

    def check_schema(self, schema: Mapping[str, Any]) -> None:
        """The answer is held to ``schema`` by a grammar: a constraint the grammar would
        not hold is refused rather than dropped, as is a schema it cannot be made of."""
        unheld = unheld_keywords(schema)
        if unheld:
            raise ResponseSchemaError(
                f"the local model's grammar cannot hold {unheld[0]} (of {len(unheld)}: {', '.join(unheld[:6])}), so an "
                "answer could break it; leave it out of the schema and check it in your code, or use a remote model "
                "that holds it", at=unheld[0])
        try:
            schema_grammar(schema)
        except ValueError as exc:
            raise ResponseSchemaError(f"{exc}; send a JSON schema of objects, arrays, strings, numbers, booleans "
                                      "and null") from None

    def reusable_prefix(self, messages, *, tools=None) -> int:
        """Prompt tokens of ``messages`` this model's context holds evaluated now (0
        before the model is loaded). A snapshot: another thread's call may change it
        before this prompt's own call."""
        llm = self._llm
        if llm is None:
            return 0
        tokens = self.counter.prompt_tokens(messages, tools=tools)
        return self._restorable(tokens, _kept_prefix(llm, tokens))[0]  # never less than what is held

    def _restorable(self, tokens, kept: int):
        """How many prompt tokens a kept state would spare, and that state, when it spares
        :data:`KEEP_AT_LEAST` more than the context holds (else ``kept`` and None)."""
        if self.state_cache is None or not tokens:
            return kept, None
        shared, entry = self.state_cache.best(tokens)
        usable = shared if shared < len(tokens) else shared - 1  # the last is evaluated for its logits
        if entry is None or usable < kept + KEEP_AT_LEAST:
            return kept, None
        return usable, entry

    def _keep_held(self, llm, kept: int) -> None:
        """Copy the evaluated prefix the context holds into the state cache when this
        call would discard :data:`KEEP_AT_LEAST` or more of its tokens. Under the model
        lock. The state is llama.cpp's of sequence 0 (llama-cpp-python evaluates every
        prompt there): its KV cells only, no logits, so a restored prefix is always
        followed by at least one evaluated token."""
        cache = self.state_cache
        held = int(llm.n_tokens)
        if cache is None or not self._held_worth_keeping or held - kept < KEEP_AT_LEAST:
            return
        tokens = llm.input_ids[:held]
        if cache.holds(tokens):
            return
        import ctypes

        llama_cpp = _llama_cpp()
        size = int(llama_cpp.llama_state_seq_get_size(llm.ctx, 0))
        if size == 0 or size + tokens.nbytes > cache.limit_bytes:
            return
        data = bytearray(size)
        written = int(llama_cpp.llama_state_seq_get_data(llm.ctx, (ctypes.c_uint8 * size).from_buffer(data), size, 0))
        if 0 < written <= size:
            del data[written:]
            cache.put(tokens, data)

    def _restore(self, llm, tokens, kept: int) -> int:
        """Take back the kept state that spares the most of ``tokens``, if any spares
        more than the context holds; returns the prompt tokens now kept. A state the
        model refuses is dropped, and the prompt evaluated whole: slower, never wrong."""
        _, entry = self._restorable(tokens, kept)
        cache = self.state_cache
        if entry is None or cache is None:
            return kept
        import ctypes

        llama_cpp = _llama_cpp()
        memory = llama_cpp.llama_get_memory(llm.ctx)
        llama_cpp.llama_memory_clear(memory, True)
        size = len(entry.data)
        taken = int(llama_cpp.llama_state_seq_set_data(llm.ctx, (ctypes.c_uint8 * size).from_buffer(entry.data),
                                                        size, 0))
        if taken != size:
            _log.warning("llama.cpp refused a kept state of %d tokens; the prompt is evaluated whole",
                         len(entry.tokens))
            cache.forget(entry)
            self._forget_evaluation(llm)
            return 0
        held = len(entry.tokens)
        llm.input_ids[:held] = entry.tokens
        llm.n_tokens = held
        llm._requires_eval = True  # no logits came back: the last prompt token is evaluated again
        cache.used(entry)
        return _kept_prefix(llm, tokens)

    def _stream(self, request: ChatRequest, *, cancel: Any, timeout_s: float | None) -> ChunkStream:
        tokens = self.counter.prompt_tokens(request.messages, tools=request.tools)
        self._check_fits(len(tokens), request.max_tokens)
        llm = self._model()
        kept = 0
        grammar = None
        if request.schema is not None:
            grammar = checked_grammar(llm, schema_grammar(request.schema))
        generated = 0
        reason: FinishReason = "stop"
        with _inference_turn(timeout_s) as started:  # the limit counts the wait for the turn
            guard = self._guard
            guard.arm(cancel, None if timeout_s is None else started + timeout_s)
            self._set_abort(llm, True)
            attached = True
            try:
                if cancel is not None and cancel.is_set():
                    reason = "cancelled"  # before any evaluation: the cache stays as it is
                else:
                    kept = _kept_prefix(llm, tokens)  # under the lock: what this call will not evaluate
                    if request.sampling is not None and request.sampling.seed is not None:
                        # A seed asks for the same reply again. llama.cpp's logits differ in
                        # their last bits between a prompt evaluated whole and one whose start
                        # was kept (other batch shapes), which at a temperature above 0 is
                        # another reply: evaluate the whole prompt, as every seeded call does.
                        self._keep_held(llm, 0)
                        self._forget_evaluation(llm)
                        kept = 0
                    else:
                        self._keep_held(llm, kept)
                        kept = self._restore(llm, tokens, kept)
                    self._held_worth_keeping = request.keep_state
                    # The caller's sampling goes to llama.cpp's sampler by the same names
                    # (a seed per call: llama-cpp-python reseeds every completion).
                    sampling = request.sampling.given() if request.sampling is not None else {}
                    stream = llm.create_completion(prompt=tokens, max_tokens=request.max_tokens,
                                                   temperature=request.temperature, stop=request.stop or [],
                                                   repeat_penalty=1.0 if grammar is not None else self.repeat_penalty,
                                                   grammar=grammar, stream=True, **sampling)
                    try:
                        # llama-cpp-python streams one piece per generated token (it holds
                        # back a token that ends inside a UTF-8 character and sends it with
                        # the next).
                        while True:
                            try:
                                part = next(stream)
                            except StopIteration:
                                break
                            except BaseException as exc:
                                # Stopped somewhere inside llama-cpp-python ("llama_decode
                                # returned 2" when the guard fired): forget the evaluation.
                                self._forget_evaluation(llm)
                                if guard.fired is None or not isinstance(exc, RuntimeError):
                                    raise
                                break
                            if attached:  # the prompt is evaluated: from here on, stop at tokens
                                self._set_abort(llm, False)
                                attached = False
                            choice = part["choices"][0]
                            if choice.get("text"):
                                generated += 1
                                yield TextChunk(choice["text"])
                            if choice.get("finish_reason"):
                                reason = finish_reason(choice["finish_reason"])
                            if cancel is not None and cancel.is_set():
                                reason = "cancelled"
                                break
                            if timeout_s is not None and time.monotonic() - started > timeout_s:
                                raise GenerationTimeout(
                                    f"the local generation ran past its {timeout_s:g} s limit after "
                                    f"{generated} tokens; it was stopped")
                    finally:
                        stream.close()  # stops llama.cpp decoding now, not at garbage collection
                    if guard.fired is not None:
                        reason = self._aborted(guard, timeout_s, len(tokens))
            finally:
                if attached:
                    self._set_abort(llm, False)
                guard.disarm()
        yield Finish(reason, len(tokens), generated, cached_tokens=kept)

    @staticmethod
    def _aborted(guard: _AbortGuard, timeout_s: float | None, prompt_tokens: int) -> FinishReason:
        """The stream's finish reason after the abort callback stopped the prompt's
        evaluation, or the exception that ends the stream."""
        if guard.fired == "cancel":
            return "cancelled"
        if guard.fired == "timeout":
            raise GenerationTimeout(f"the local generation ran past its {timeout_s:g} s limit while evaluating "
                                    f"the {prompt_tokens}-token prompt; it was stopped")
        if guard.fired == "interrupt":
            raise KeyboardInterrupt
        assert guard.error is not None
        raise guard.error
