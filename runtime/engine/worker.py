"""The engine worker process: loads one model and runs the step loop over a pipe.

A crash or an out-of-memory abort inside llama.cpp kills this process, not the service;
the service sees the pipe close and fails the waiting requests.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, replace
from importlib.metadata import version
from multiprocessing.connection import Connection
from pathlib import Path

from runtime.chat.chat_template import ChatTemplateError
from runtime.chat.template_analysis import contract_for
from runtime.backends.errors import BackendError, ModelLoadError
from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.backends.media import MediaError
from runtime.backends.vocab_match import vocab_mismatch
from runtime.config import DEFAULT_CTX
from runtime.engine.checkpoints import speculation_refusal
from runtime.engine.context_overflow import Fitted, fit, reply_room
from runtime.engine.disk_cache import DiskCache, disk_capacity, layout_key, model_identity
from runtime.engine.engine import (
    CONTEXT_LENGTH_EXCEEDED, INVALID_REQUEST, REQUEST_FAILED, CacheConfig, Engine, RequestRejected,
)
from runtime.engine.protocol import ErrorCode
from runtime.engine.speculator import MODEL, NGRAM, Speculator
from runtime.engine.messages import (
    Accepted, Cancel, Fatal, Loaded, LoadFailed, Rejected, Shutdown, Stats, StepResult, Submit,
    WorkerSpec,
)
from runtime.engine.submit_check import check_submit
from runtime.kernels.block_hash import scope_root
from runtime.media import Media, MediaLayout, MediaSpan
from runtime.private_files import private_dir

log = logging.getLogger("hearth")



# Prompts longer than ``WorkerSpec.inline_tokenize_chars`` are tokenized on a helper thread:
# llama_tokenize only reads the vocabulary and ctypes releases the GIL around it, so the step
# loop keeps decoding the other requests meanwhile (llama.cpp's own server tokenizes in its
# HTTP threads the same way). Shorter ones take well under a millisecond inline.
#: how long an idle loop waits for the pipe while a prompt is being tokenized
_TOKENIZE_POLL_S = 0.002


class _Encoding:
    """A prepared media prompt whose projector runs on the helper thread: done when it is."""

    def __init__(self, future: Future, prepared: tuple[list[int], MediaLayout]) -> None:
        self.future = future
        self.prepared = prepared

    def done(self) -> bool:
        return self.future.done()

    def cancel(self) -> bool:
        return self.future.cancel()

    def result(self) -> tuple[list[int], MediaLayout]:
        self.future.result()
        return self.prepared


class _Worker:
    def __init__(self, conn: Connection, backend: LlamaBackend, spec: WorkerSpec,
                 speculator: Speculator | None = None) -> None:
        self.conn = conn
        self.backend = backend
        e = spec.engine
        cache = CacheConfig(e.block_size, e.prefix_cache, e.cache_fraction, e.cache_ram)
        self.disk = open_disk_cache(spec)
        self.engine = Engine(backend, e.parallel, cache, speculator, self.disk)
        self.inline_tokenize_chars = spec.inline_tokenize_chars
        self._tokenizer = ThreadPoolExecutor(1, thread_name_prefix="hearth-tokenize")
        #: submits whose prompt is being tokenized, in arrival order
        self._tokenizing: dict[str, tuple[Submit, list[str], Future | _Encoding]] = {}
        #: why the model's projector could not be loaded (None: it was, or there is none)
        self.media_refusal: str | None = None

    def handle(self, msg: object) -> bool:
        """Apply one message; False means stop."""
        if isinstance(msg, Submit):
            self._submit(msg)
        elif isinstance(msg, Cancel):
            preparing = self._tokenizing.pop(msg.request_id, None)
            if preparing is None:
                self.engine.cancel(msg.request_id)
            else:  # its media or prompt not started yet on the helper thread: never (one under way ends)
                preparing[2].cancel()
        elif isinstance(msg, Shutdown):
            return False
        return True

    def _submit(self, msg: Submit) -> None:
        """Check, render and tokenize (inline, or on the helper thread for a long prompt).

        Any failure here belongs to this one request: it gets ``Rejected`` with a code.
        """
        try:
            check_submit(msg)
            extra_stop: list[str] = []
            # A raw prompt's special tokens are read as such (a hand-written template, an editor's
            # fill-in-the-middle markers), as llama-server and vLLM read them; a chat message's
            # text never is: the template renders it and only the template's markers count.
            add_special, parse_special = True, True
            if msg.media and self.backend.projector is None:
                why = (f"this model's projector cannot be used ({self.media_refusal}); it reads text only here"
                       if self.media_refusal else "this model reads text only")
                raise RequestRejected(f"{why}: send the images or audio to a model that has a projector (vision "
                                      "or audio), or leave them out", ErrorCode.MEDIA_NOT_SUPPORTED)
            if msg.messages is not None and msg.overflow is not None and not msg.media:
                # renders and tokenizes until the conversation fits: never on the step loop
                fitting: Future = self._tokenizer.submit(self._fit, msg)
                self._tokenizing[msg.request_id] = (msg, self.backend.chat_template.stop, fitting)
                return
            if msg.messages is not None:
                text, add_special = self.backend.chat_text(msg.messages, **(msg.template_vars or {}))
                parse_special = True
                extra_stop = self.backend.chat_template.stop
            elif msg.tokens is not None:
                self._admit(msg, list(msg.tokens), extra_stop)
                return
            else:
                text = msg.prompt or ""
            if msg.media:
                # decoding images and laying out their chunks is slow: never on the step loop
                media_job: Future = self._tokenizer.submit(self._prepare_media, text, msg.media, add_special,
                                                           parse_special)
                self._tokenizing[msg.request_id] = (msg, extra_stop, media_job)
                return
            if len(text) > self.inline_tokenize_chars:
                self._check_fits(text)
                future = self._tokenizer.submit(self._tokenize, text, add_special, parse_special)
                self._tokenizing[msg.request_id] = (msg, extra_stop, future)
                return
            tokens = self._tokenize(text, add_special, parse_special)
        except RequestRejected as e:
            self.conn.send(Rejected(msg.request_id, str(e), e.code, e.sizes))
            return
        except ChatTemplateError as e:
            self.conn.send(Rejected(msg.request_id, str(e), ErrorCode.CHAT_TEMPLATE))
            return
        except Exception as e:  # noqa: BLE001 - one request's bad data must not end the worker
            self.conn.send(Rejected(msg.request_id, f"the request could not be prepared ({type(e).__name__}: {e})",
                                    INVALID_REQUEST))
            return
        self._admit(msg, tokens, extra_stop)

    def _tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        """The tokens of ``text``; a prompt that starts with the BOS token's own text gets one BOS,
        not two (the tokenizer adds one, the text holds the other)."""
        tokens = self.backend.tokenize(text, add_special=add_special, parse_special=parse_special)
        bos = self.backend.bos
        if len(tokens) > 1 and tokens[0] == tokens[1] == bos and bos >= 0:
            del tokens[0]
        return tokens

    def _fit(self, msg: Submit) -> Fitted:
        """The conversation's tokens with the fewest turns left out that leave the reply its room
        (``runtime.engine.context_overflow``); the length check at admission refuses what even
        then does not fit."""
        assert msg.messages is not None and msg.overflow is not None  # only submitted so

        def tokenize(messages: list[dict]) -> list[int]:
            text, add_special = self.backend.chat_text(messages, **(msg.template_vars or {}))
            return self._tokenize(text, add_special, True)

        limit = self.engine.max_request_tokens
        return fit(msg.messages, msg.overflow, tokenize, limit - reply_room(msg.params.max_tokens, limit))

    def _prepare_media(self, text: str, media: list[Media], add_special: bool,
                       parse_special: bool) -> tuple[list[int], MediaLayout]:
        projector = self.backend.projector
        assert projector is not None  # checked at submit
        self._check_fits(text)
        return projector.prepare(text, media, add_special, parse_special, self.backend.n_batch)

    @staticmethod
    def _encode(spans: list[MediaSpan]) -> None:
        for span in spans:
            span.embeddings()

    def _check_fits(self, text: str) -> None:
        """Refuse at once a prompt too long for the context whatever its tokens: each token
        stands for at most ``max_piece_bytes`` of text, so more bytes than the context times
        that can never fit (and tokenizing megabytes would only take CPU from the others)."""
        limit = self.engine.max_request_tokens
        most = limit * self.backend.max_piece_bytes
        size = len(text.encode("utf-8"))
        if size > most:
            raise RequestRejected(
                f"the prompt is {size:,} bytes of text; this model's context of {limit} tokens holds at most "
                f"{most:,} (every token stands for at most {self.backend.max_piece_bytes} bytes): shorten it",
                CONTEXT_LENGTH_EXCEEDED, (size // self.backend.max_piece_bytes, limit))

    def _admit(self, msg: Submit, tokens: list[int], extra_stop: list[str],
               media: MediaLayout | None = None, dropped: int = 0) -> None:
        if msg.count_only:  # tokenize only: the prompt's length, nothing runs
            self.conn.send(Accepted(msg.request_id, len(tokens), dropped))
            return
        try:
            self.engine.add_group(msg.request_id, tokens, msg.params, msg.n, extra_stop, msg.constraint, media,
                                  owner=msg.owner)
        except RequestRejected as e:
            self.conn.send(Rejected(msg.request_id, str(e), e.code, e.sizes))
            return
        except Exception as e:  # noqa: BLE001 - e.g. a sampler llama.cpp could not make
            self.conn.send(Rejected(msg.request_id, f"the request could not be started ({type(e).__name__}: {e})",
                                    REQUEST_FAILED))
            return
        self.conn.send(Accepted(msg.request_id, len(tokens), dropped))

    def _admit_tokenized(self) -> None:
        """Admit the prompts the helper thread has finished, in arrival order."""
        while self._tokenizing:
            request_id, (msg, extra_stop, future) = next(iter(self._tokenizing.items()))
            if not future.done():
                return
            try:
                result = future.result()
            except MediaError as e:
                del self._tokenizing[request_id]
                self.conn.send(Rejected(request_id, str(e), ErrorCode.INVALID_MEDIA))
                continue
            except RequestRejected as e:
                del self._tokenizing[request_id]
                self.conn.send(Rejected(request_id, str(e), e.code, e.sizes))
                continue
            except Exception as e:  # noqa: BLE001 - the tokenizer's failure is this request's
                del self._tokenizing[request_id]
                self.conn.send(Rejected(request_id, f"the prompt could not be prepared ({type(e).__name__}: {e})",
                                        REQUEST_FAILED if isinstance(future, _Encoding) else INVALID_REQUEST))
                continue
            if isinstance(result, tuple) and not msg.count_only:
                tokens, layout = result
                # the projector runs (on the helper thread) only for media the cache does not hold
                reach = self.engine.kv.cached_reach(tokens, scope_root(msg.owner.cache_scope))
                todo = [s for s in layout.spans if s.end > reach and s.embd is None]
                if todo:
                    self._tokenizing[request_id] = (msg, extra_stop, _Encoding(
                        self._tokenizer.submit(self._encode, todo), result))
                    continue
            del self._tokenizing[request_id]
            if isinstance(future, _Encoding):
                result = future.prepared
            if isinstance(result, tuple):
                self._admit(msg, result[0], extra_stop, result[1])
            elif isinstance(result, Fitted):
                self._admit(msg, result.tokens, extra_stop, dropped=result.dropped)
            else:
                self._admit(msg, result, extra_stop)

    def _step(self) -> list:
        """One engine step. A failure the step could not pin on one request ends the requests
        it had scheduled and nothing else; only a decode that left the context in an unknown
        state (``BackendError``) ends the worker."""
        try:
            return self.engine.step(hold_finished=True)
        except BackendError:
            raise
        except Exception as e:  # noqa: BLE001 - see the docstring: never one request's end for all
            log.exception("an engine step failed; its requests end, the others go on")
            return self.engine.fail_step(e)

    def run(self) -> None:
        conn, engine = self.conn, self.engine
        idle_reported = False
        while True:
            self._admit_tokenized()
            if not engine.has_work():
                if not idle_reported:
                    conn.send(Stats(engine.stats()))
                    idle_reported = True
                if self._tokenizing and not conn.poll(_TOKENIZE_POLL_S):
                    continue
                if not self.handle(conn.recv()):
                    return
            while conn.poll():
                if not self.handle(conn.recv()):
                    return
            self._admit_tokenized()
            if engine.has_work():
                idle_reported = False
                outputs = self._step()
                if outputs:
                    conn.send(StepResult(outputs, engine.stats()))
                engine.release_finished()  # a finished request's state is saved while its answer goes out

    def close(self) -> None:
        self._tokenizer.shutdown(wait=True, cancel_futures=True)
        if self.disk is not None:
            self.disk.close()


def open_disk_cache(spec: WorkerSpec) -> DiskCache | None:
    """The prompt cache's disk tier for this model, or None when it is off or cannot be used."""
    e = spec.engine
    if not e.prefix_cache or e.cache_dir is None or e.cache_disk <= 0 or e.cache_ram == 0:
        return None
    try:
        folder = private_dir(Path(e.cache_dir))
        capacity = disk_capacity(e.cache_disk << 20, folder)
        if capacity <= 0:
            return None
        key = layout_key(model_identity(spec.model_path), e.block_size, e.kv_type or "f16", e.flash_attn,
                         f"llama-cpp-python {version('llama_cpp_python')}")
        return DiskCache(folder, capacity, key)
    except OSError as err:  # an unwritable data directory: the model still runs, without it
        log.warning("the prompt cache on disk is off: %s", err)
        return None


def draft_config(config: ContextConfig) -> ContextConfig:
    """The draft's settings: the target's, except that over several GPUs the draft goes whole
    on the last GPU holding the target (where the fit planner counted it), not split again,
    and beside RPC workers it stays on this machine's CPU (a draft sent over the network
    would cost what it saves)."""
    if config.cpu_moe_layers:  # the plan counts the draft whole where it runs
        config = replace(config, cpu_moe_layers=0)
    if config.rpc:
        return replace(config, rpc=(), n_gpu_layers=0, split_mode="none", tensor_split=None, main_gpu=0)
    if not config.tensor_split:
        return config
    last = max(i for i, share in enumerate(config.tensor_split) if share > 0)
    return replace(config, split_mode="none", main_gpu=last, tensor_split=None)


def load_speculator(backend: LlamaBackend, draft: str | None, config: ContextConfig,
                    draft_id: str | None = None) -> Speculator | None:
    """The speculator for ``--draft``: a draft model file (a second context, same settings),
    "ngram" (prompt lookup), or None. ModelLoadError when the draft cannot serve this target."""
    if not draft:
        return None
    why = speculation_refusal(backend.info)
    if why is not None:
        raise ModelLoadError(why)
    if draft == NGRAM:
        return Speculator(backend, None, default=NGRAM)
    # the draft's memory mirrors the target's sequences: the same ids, whatever its own layers
    model = LlamaBackend(draft, replace(draft_config(config), n_seq_max=backend.n_seq_max, n_seq_running=None))
    why = vocab_mismatch(backend, model)
    if why is not None:
        model.close()
        raise ModelLoadError(f"draft model {Path(draft).name} refused: {why}")
    names = tuple(n for n in (draft_id, Path(draft).name, draft) if n)
    return Speculator(backend, model, default=MODEL, draft_names=names)


def worker_main(conn: Connection, spec: WorkerSpec) -> None:
    """Entry point of the spawned process."""
    e = spec.engine
    config = ContextConfig(n_ctx=e.ctx or DEFAULT_CTX, n_seq_max=min(256, e.parallel + spec.cache_seqs),
                           n_seq_running=e.parallel,
                           n_batch=e.n_batch, n_threads=e.threads, kv_type=e.kv_type or "f16",
                           flash_attn=e.flash_attn, n_gpu_layers=spec.n_gpu_layers,
                           split_mode=spec.split_mode, tensor_split=spec.tensor_split, main_gpu=spec.main_gpu,
                           cpu_moe_layers=spec.cpu_moe_layers, rpc=e.rpc)
    speculator = None
    try:
        backend = LlamaBackend(spec.model_path, config, chat_template=spec.chat_template)
        media_refusal = None
        if spec.mmproj_path:
            try:
                backend.attach_projector(spec.mmproj_path, use_gpu=spec.n_gpu_layers != 0)
            except ModelLoadError as e:  # the model still chats: text only, and a request with media is told why
                log.warning("%s: text only, the projector is not used: %s", spec.model_id, e)
                media_refusal = str(e)
        try:
            speculator = load_speculator(backend, spec.draft, config, spec.draft_id)
        except ModelLoadError as e:
            backend.close()
            conn.send(LoadFailed(str(e), ErrorCode.DRAFT_REFUSED))
            return
    except ModelLoadError as e:
        conn.send(LoadFailed(str(e)))
        return
    except ChatTemplateError as e:  # not Jinja: the model cannot chat with it (the process ends, freeing it)
        conn.send(LoadFailed(f"{spec.model_id}: {e}; give it a template that works (PUT /hearth/models/ID/template, "
                             "the app's model settings, or hearth serve --chat-template-file)"))
        return
    worker = _Worker(conn, backend, spec, speculator)
    worker.media_refusal = media_refusal
    template = backend.chat_template
    contract = contract_for(template.source, template.bos, template.eos, template.renderer)
    conn.send(Loaded(os.getpid(), backend.n_ctx, worker.engine.max_request_tokens, asdict(backend.info),
                     n_vocab=backend.info.n_vocab, chat_template=template.source, contract=contract,
                     media=asdict(backend.projector.caps) if backend.projector is not None else None))
    try:
        worker.run()
    except (EOFError, OSError):
        pass  # the service went away
    except BackendError as e:
        conn.send(Fatal(f"the engine stopped: {e}"))
    finally:
        worker.close()
        if speculator is not None and speculator.draft is not None:
            speculator.draft.close()
        backend.close()
