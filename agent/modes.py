"""How each run mode answers: ``chat`` (one streamed model call), ``rag`` (retrieve, then an
answer that cites its sources) and ``agent`` (the ReAct loop with tools). Each reports what it
does to the run's recorder as it happens and returns the answer's text."""

from __future__ import annotations

import time
from contextlib import aclosing

import structlog

from agent.knowledge.rag import rag_answer
from agent.knowledge.search import SearchResult
from agent.llm.base import ChatMessage, LLMProvider, LLMResponse
from agent.loop import LoopConfig, run_react
from agent.models import AgentRun, RunMode
from agent.prompt import inputs_note
from agent.protocols import configured_protocol
from agent.recorder import RunRecorder
from agent.slots import RunSlot
from agent.tools.registry import ToolContext, default_registry
from sandbox.services import CodeSession

logger = structlog.get_logger(__name__)

#: The system message of a plain chat run (the conversation's turns follow it).
CHAT_SYSTEM_PROMPT = (
    "You are DevAssist, a developer assistant. Answer the user's message directly and "
    "concisely, in the language of the message. Use Markdown; put code in fenced blocks with "
    "their language."
)


async def answer(
    run: AgentRun,
    *,
    history: list[ChatMessage],
    llm: LLMProvider,
    recorder: RunRecorder,
    collection: str | None,
    slot: RunSlot,
    sandbox: CodeSession | None = None,
) -> str:
    """The run's answer in its mode. ``llm`` is the run's model as ``slot`` wraps it; the
    tools are wrapped here; ``collection`` is the knowledge collection a ``rag`` run answers
    from and the agent's ``search_docs`` searches by default; ``sandbox`` is where the run's
    ``execute_code`` calls run (the model is told of its input files). Raises what the mode
    raises (the model's ``LLMUnavailable``/``LLMTimeout``, ``AgentMaxIterations``,
    ``AgentFormatErrors``, the knowledge errors)."""
    if run.mode == RunMode.RAG:
        return await _answer_from_documents(run, llm, recorder, collection, slot)
    if run.mode == RunMode.CHAT and llm.writes_free_text:
        return await _chat(run, history, llm, recorder)
    # The offline provider answers only in the agent's protocols, and all it can do is run
    # code it is given: its chat goes through the loop, with the tools.
    registry = default_registry()
    return await run_react(
        task=run.input + inputs_note(sandbox.inputs if sandbox is not None else ()),
        history=history,
        llm=llm,
        tools=slot.tools(registry.subset(run.tools) if run.mode == RunMode.AGENT else registry),
        recorder=recorder,
        context=ToolContext(
            user=run.user,
            run_id=run.id,
            collection=collection,
            # Called back from inside a tool call, when the slot is free: recording takes it.
            on_output=slot.holding(recorder.tool_output),
            sandbox=sandbox,
        ),
        config=LoopConfig(),
        protocol=configured_protocol(),
    )


async def _chat(
    run: AgentRun, history: list[ChatMessage], llm: LLMProvider, recorder: RunRecorder
) -> str:
    """One streamed model call on the conversation and the message; each piece of text goes
    out as a delta. Recorded as a ``thought`` step (the call) and the ``response``."""
    messages: list[ChatMessage] = [
        {"role": "system", "content": CHAT_SYSTEM_PROMPT},
        *history,
        {"role": "user", "content": run.input},
    ]
    started_at, started = time.time(), time.monotonic()
    recorder.model_calling("chat", messages)
    text = ""
    response: LLMResponse | None = None
    # Closed on the way out, so a cancellation while a delta is recorded closes the HTTP stream.
    async with aclosing(llm.stream(messages)) as stream:
        async for chunk in stream:
            if chunk.response is not None:
                response = chunk.response
                break
            text += chunk.delta
            await recorder.answer_delta(chunk.delta)
    if response is None:
        response = LLMResponse(
            content=text, model=llm.model, latency_ms=int((time.monotonic() - started) * 1000)
        )
    await recorder.answered(
        response.content,
        streamed=True,
        model_call=recorder.model_call(response, name="chat", started_at=started_at),
    )
    return response.content


async def _answer_from_documents(
    run: AgentRun, llm: LLMProvider, recorder: RunRecorder, collection: str | None, slot: RunSlot
) -> str:
    """Retrieve (a ``step`` event the moment the chunks are found) and answer with sources
    (``agent.knowledge.rag``), streaming the answer as deltas; the model call that wrote it is
    a ``thought`` step before the ``response``. The answer waits on the search and the model
    with the run's slot free; it is held while the run records them."""
    started_at, started = time.time(), time.monotonic()
    streamed = ""

    async def retrieved(chunks: list[SearchResult]) -> None:
        await recorder.retrieved(
            chunks, collection=collection, started_at=started_at, started=started
        )

    async def delta(text: str) -> None:
        nonlocal streamed
        streamed += text
        await recorder.answer_delta(text)

    async with slot.released():
        result = await rag_answer(
            question=run.input,
            collection=collection,
            llm=llm,
            on_retrieved=slot.holding(retrieved),
            on_delta=slot.holding(delta),
            on_asking=lambda messages: recorder.model_calling("answer", messages),
        )
    # The Sources list (and an extractive answer) are not streamed by the model; what was
    # streamed is a prefix of the answer (``rag_answer`` holds back a list the model wrote).
    if result.answer.startswith(streamed):
        await recorder.answer_delta(result.answer[len(streamed) :])
    else:
        logger.warning("rag_stream_not_a_prefix", run_id=str(run.id), streamed=len(streamed))
    sources = [
        {
            "number": s.number,
            "source": s.source,
            "chunk_index": s.chunk_index,
            "title": s.title,
            "label": s.label,
        }
        for s in result.sources
    ]
    model_call = None
    if result.response is not None:
        model_call = recorder.model_call(
            result.response,
            name="answer",
            started_at=time.time() - result.response.latency_ms / 1000,
        )
    await recorder.answered(
        result.answer, streamed=True, data={"sources": sources}, model_call=model_call
    )
    return result.answer
