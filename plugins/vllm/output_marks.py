"""Outputs produced under a lossy acceptance rule say so: `sagespec_lossy_acceptance`, the rule's
name, on each `RequestOutput` (LLM.generate, AsyncLLM) and in the OpenAI server's completion and
chat responses (and in each chunk of a streamed one); None / absent where the output is lossless.

The acceptance rule is server-wide, so the front end knows it: each engine's output processor
keeps it, and a request is marked when sagespec's rules verify it (`draft_mode` "ours", the same
test the runner applies); requests that vLLM verifies itself, or that get no drafts, stay unmarked.
"""

from __future__ import annotations

import json

from sagespec.plugins._hooks import Hook

from .options import ATTRIBUTE
from .tree_step import draft_mode, has_engine_watermark

KEY = "sagespec_lossy_acceptance"
OUTPUTS = "vllm.v1.engine.output_processor"
CHAT = "vllm.entrypoints.openai.chat_completion.serving:OpenAIServingChat"
COMPLETION = "vllm.entrypoints.openai.completion.serving:OpenAIServingCompletion"


def lossy_rule(vllm_config) -> tuple[str, bool] | None:
    """(rule, engine watermark) when the engine runs sage with a lossy rule, else None."""
    options = getattr(getattr(vllm_config, "speculative_config", None), ATTRIBUTE, None)
    if options is None or options.lossless:
        return None
    return options.acceptance, has_engine_watermark(vllm_config)


def _engine_init(original):
    def __init__(self, vllm_config, *args, **kwargs):
        original(self, vllm_config, *args, **kwargs)
        self.output_processor.sagespec_lossy = lossy_rule(vllm_config)

    return __init__


def _add_request(original):
    def add_request(self, request, *args, **kwargs):
        out = original(self, request, *args, **kwargs)
        lossy = getattr(self, "sagespec_lossy", None)
        state = self.request_states.get(request.request_id)
        if lossy is not None and state is not None:
            rule, watermark = lossy
            state.sagespec_lossy = rule if draft_mode(request.sampling_params, watermark) == "ours" else None
        return out

    return add_request


def _new_request_output(original):
    def _new(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        rule = getattr(self, "sagespec_lossy", None)
        if rule is not None:
            setattr(out, KEY, rule)
        return out

    return _new


def _rule_of(outputs) -> str | None:
    return next((getattr(o, KEY) for o in outputs if getattr(o, KEY, None)), None)


class _Seen:
    """Passes a result generator through, remembering the lossy rule of what went by."""

    def __init__(self, results, pairs: bool):
        self.results, self.pairs, self.rule = results, pairs, None

    async def __aiter__(self):
        async for item in self.results:
            output = item[1] if self.pairs else item
            self.rule = self.rule or getattr(output, KEY, None)
            yield item


def _mark_chunk(chunk: str, rule: str) -> str:
    """Adds the mark to one server-sent `data: {...}` event; other lines pass unchanged."""
    if not chunk.startswith("data: {"):
        return chunk
    body = json.loads(chunk[len("data: ") :])
    body[KEY] = rule
    return f"data: {json.dumps(body)}\n\n"


def _completion_response(original):
    def request_output_to_completion_response(self, final_res_batch, *args, **kwargs):
        response = original(self, final_res_batch, *args, **kwargs)
        rule = _rule_of(final_res_batch)
        if rule is not None:
            setattr(response, KEY, rule)  # OpenAI models allow extra fields; they are serialised
        return response

    return request_output_to_completion_response


def _chat_full(original):
    async def chat_completion_full_generator(self, request, result_generator, *args, **kwargs):
        seen = _Seen(result_generator, pairs=False)
        response = await original(self, request, seen.__aiter__(), *args, **kwargs)
        if seen.rule is not None and hasattr(response, "choices"):
            setattr(response, KEY, seen.rule)
        return response

    return chat_completion_full_generator


def _stream(pairs: bool):
    def wrap(original):
        if pairs:  # completions: (request, engine_inputs, result_generator, ...)

            async def stream(self, request, engine_inputs, result_generator, *args, **kwargs):
                seen = _Seen(result_generator, pairs=True)
                async for chunk in original(self, request, engine_inputs, seen.__aiter__(), *args, **kwargs):
                    yield _mark_chunk(chunk, seen.rule) if seen.rule else chunk
        else:  # chat: (request, result_generator, ...)

            async def stream(self, request, result_generator, *args, **kwargs):
                seen = _Seen(result_generator, pairs=False)
                async for chunk in original(self, request, seen.__aiter__(), *args, **kwargs):
                    yield _mark_chunk(chunk, seen.rule) if seen.rule else chunk

        return stream

    return wrap


HOOKS = (
    Hook("vllm.v1.engine.llm_engine:LLMEngine.__init__", params=("vllm_config",)),
    Hook("vllm.v1.engine.async_llm:AsyncLLM.__init__", params=("vllm_config",)),
    Hook(f"{OUTPUTS}:OutputProcessor.add_request", params=("request",)),
    Hook(f"{OUTPUTS}:RequestState._new_request_output"),
    Hook(f"{COMPLETION}.request_output_to_completion_response", params=("final_res_batch",)),
    Hook(f"{CHAT}.chat_completion_full_generator", params=("request", "result_generator")),
    Hook(f"{CHAT}.chat_completion_stream_generator", params=("request", "result_generator")),
    Hook(f"{COMPLETION}.completion_stream_generator", params=("request", "engine_inputs", "result_generator")),
)


def add_patches(p) -> None:
    p.add("vllm.v1.engine.llm_engine:LLMEngine", "__init__", _engine_init)
    p.add("vllm.v1.engine.async_llm:AsyncLLM", "__init__", _engine_init)
    p.add(f"{OUTPUTS}:OutputProcessor", "add_request", _add_request)
    p.add(f"{OUTPUTS}:RequestState", "_new_request_output", _new_request_output)
    p.add(COMPLETION, "request_output_to_completion_response", _completion_response)
    p.add(CHAT, "chat_completion_full_generator", _chat_full)
    p.add(CHAT, "chat_completion_stream_generator", _stream(pairs=False))
    p.add(COMPLETION, "completion_stream_generator", _stream(pairs=True))
