"""LLM providers: the OpenAI one against a real scripted HTTP server, the offline one, get_llm()."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from contextlib import aclosing
from http import HTTPStatus
from typing import Any

import pytest
import structlog
from django.test import override_settings

from agent.exceptions import LLMTimeout, LLMUnavailable
from agent.llm import ChatMessage, LLMChunk, LLMProvider, LLMResponse, Usage, get_llm
from agent.llm.offline import OfflineProvider
from agent.llm.openai_provider import OpenAIProvider
from devassist.api import http_status
from tests.agent.conftest import TEST_API_KEY
from tests.agent.fake_openai import FakeOpenAI
from tests.servers import free_port

TASK: list[ChatMessage] = [
    {"role": "system", "content": "You are DevAssist."},
    {"role": "user", "content": "What is 1+1?"},
]
REACT_STOP = ["\nObservation:"]


async def collect(
    provider: LLMProvider, messages: list[ChatMessage], **kwargs: Any
) -> tuple[list[str], LLMResponse]:
    """The deltas of a stream and its final response (which must come last, once)."""
    deltas: list[str] = []
    final: list[LLMResponse] = []
    async for chunk in provider.stream(messages, **kwargs):
        assert not final, "nothing may follow the final chunk"
        if chunk.response is not None:
            final.append(chunk.response)
        else:
            deltas.append(chunk.delta)
    assert len(final) == 1
    return deltas, final[0]


def provider_on(fake: FakeOpenAI, **options: Any) -> OpenAIProvider:
    settings: dict[str, Any] = {
        "base_url": fake.base_url,
        "api_key": TEST_API_KEY,
        "model": "fake-model",
        "timeout_s": 5,
        "max_retries": 2,
    }
    return OpenAIProvider(**{**settings, **options})


async def wait_for_disconnect(fake: FakeOpenAI) -> None:
    """The fake server notices that the client went away (it watches while it waits)."""
    for _ in range(250):
        if fake.disconnects:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the client never closed its connection")


# -- OpenAIProvider: complete() -------------------------------------------------------------


async def test_complete_returns_content_usage_and_latency(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script(
        [
            {
                "content": "Thought: easy\nAction: final: 2",
                "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
            }
        ]
    )

    response = await openai_provider.complete(TASK)

    assert response.content == "Thought: easy\nAction: final: 2"
    assert response.model == "fake-model"
    assert response.usage == Usage(prompt_tokens=12, completion_tokens=7)
    assert response.usage.total_tokens == 19
    assert response.finish_reason == "stop"
    assert response.latency_ms >= 0
    [request] = fake_openai.requests
    assert request["model"] == "fake-model"
    assert request["messages"] == TASK
    assert request["temperature"] == 0.0
    assert request["max_tokens"] == 1024
    assert not request.get("stream")
    assert "stop" not in request
    assert fake_openai.headers[0]["authorization"] == f"Bearer {TEST_API_KEY}"


async def test_complete_without_usage_reports_unknown_usage_not_zero(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"content": "hi", "usage": None, "finish_reason": "length"}])

    response = await openai_provider.complete(TASK)

    assert response.usage is None
    assert response.finish_reason == "length"
    assert response.truncated


async def test_complete_sends_the_first_four_stop_sequences_and_enforces_all(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    stops = ["<1>", "<2>", "<3>", "<4>", "\nObservation:"]
    fake_openai.script(["Thought: x\nAction: final: y\nObservation: made up"])

    response = await openai_provider.complete(TASK, stop=stops)

    assert fake_openai.requests[0]["stop"] == stops[:4]
    assert response.content == "Thought: x\nAction: final: y"
    assert response.finish_reason == "stop"


async def test_complete_cuts_a_hallucinated_observation_when_the_server_ignores_stop(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script(
        [{"content": "Thought: x\nAction: final: y\nObservation: fake", "ignore_stop": True}]
    )

    response = await openai_provider.complete(TASK, stop=REACT_STOP)

    assert fake_openai.requests[0]["stop"] == REACT_STOP
    assert response.content == "Thought: x\nAction: final: y"
    assert response.finish_reason == "stop"


# -- OpenAIProvider: stream() ---------------------------------------------------------------


async def test_stream_yields_deltas_in_order_then_the_response_with_usage(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    chunks = ["Thought", ": adding", "\nAction", ": final: ", "2"]
    fake_openai.script(
        [
            {
                "chunks": chunks,
                "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
            }
        ]
    )

    deltas, response = await collect(openai_provider, TASK)

    assert deltas == chunks
    assert response.content == "".join(chunks)
    assert response.usage == Usage(prompt_tokens=20, completion_tokens=5)
    assert response.finish_reason == "stop"
    assert response.model == "fake-model"
    [request] = fake_openai.requests
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}


async def test_stream_stops_at_a_stop_sequence_the_server_ignores_and_closes_the_stream(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script(
        [
            {
                "chunks": ["Thought: x\nAction: final: y", "\nObs", "ervation: fake", " more"],
                "chunk_delay_s": 0.05,
                "ignore_stop": True,
            }
        ]
    )
    deltas: list[str] = []
    response: LLMResponse | None = None
    stream = openai_provider.stream(TASK, stop=REACT_STOP)

    # Stop at the response without closing the generator, as consumers often do.
    async for chunk in stream:
        if chunk.response is not None:
            response = chunk.response
            break
        deltas.append(chunk.delta)

    assert "".join(deltas) == "Thought: x\nAction: final: y"
    assert response is not None
    assert response.content == "Thought: x\nAction: final: y"
    assert response.finish_reason == "stop"
    await wait_for_disconnect(fake_openai)


async def test_stream_holds_back_a_possible_stop_sequence_until_it_is_not_one(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"chunks": ["a\nObs", "erve this", " end"]}])

    deltas, response = await collect(openai_provider, TASK, stop=REACT_STOP)

    assert deltas == ["a", "\nObserve this", " end"]
    assert response.content == "a\nObserve this end"


async def test_stream_falls_back_without_stream_options_when_the_server_rejects_them(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script(
        [
            {"content": "hello there", "reject_stream_options": True},
            {"content": "again", "reject_stream_options": True},
        ]
    )

    deltas, response = await collect(openai_provider, TASK)
    _, second = await collect(openai_provider, TASK)

    assert "".join(deltas) == response.content == "hello there"
    assert response.usage is None
    assert second.content == "again"
    first, retried, later = fake_openai.requests
    assert first["stream_options"] == {"include_usage": True}
    assert "stream_options" not in retried
    assert "stream_options" not in later


async def test_stream_cut_off_by_the_server_is_unavailable(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"chunks": ["one ", "two ", "three"], "drop_after_chunks": 1}])

    with pytest.raises(LLMUnavailable, match="ended the stream"):
        await collect(openai_provider, TASK)


async def test_stream_retries_opening_then_streams(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"status": 502}, "fine"])

    deltas, response = await collect(openai_provider, TASK)

    assert "".join(deltas) == response.content == "fine"
    assert len(fake_openai.requests) == 2


# -- OpenAIProvider: retries and errors -----------------------------------------------------


async def test_two_server_errors_then_success_is_a_success_after_three_requests(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"status": 500}, {"status": 503}, "Thought: ok\nAction: final: ok"])

    response = await openai_provider.complete(TASK)

    assert response.content == "Thought: ok\nAction: final: ok"
    assert len(fake_openai.requests) == 3
    assert fake_openai.remaining == 0


async def test_server_errors_on_every_attempt_are_unavailable(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"status": 500, "message": "model crashed"}] * 5)

    with pytest.raises(LLMUnavailable) as caught:
        await openai_provider.complete(TASK)

    error = caught.value
    assert error.code == "llm_unavailable"
    assert http_status(error) == HTTPStatus.BAD_GATEWAY
    assert "500" in error.message
    assert "model crashed" in error.message
    assert error.details["status"] == 500
    assert error.details["base_url"] == fake_openai.base_url
    assert error.details["attempts"] == 3
    assert "(after 3 attempts)" in error.message
    assert len(fake_openai.requests) == 1 + openai_provider.max_retries


async def test_max_retries_is_the_sdk_s_retry_budget(fake_openai: FakeOpenAI) -> None:
    fake_openai.script([{"status": 503}] * 3)

    with pytest.raises(LLMUnavailable) as caught:
        await provider_on(fake_openai, max_retries=1).complete(TASK)

    assert caught.value.code == "llm_unavailable"
    assert caught.value.details["status"] == 503
    assert caught.value.details["attempts"] == 2
    assert len(fake_openai.requests) == 2
    # The SDK numbers its attempts in a header of its own.
    assert [h["x-stainless-retry-count"] for h in fake_openai.headers] == ["0", "1"]


async def test_a_server_that_says_not_to_retry_is_not_retried(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"status": 503, "headers": {"x-should-retry": "false"}}, "x"])

    with pytest.raises(LLMUnavailable):
        await openai_provider.complete(TASK)

    assert len(fake_openai.requests) == 1


async def test_rate_limit_waits_for_a_small_retry_after(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"status": 429, "headers": {"Retry-After": "0.3"}}, "done"])
    started = time.monotonic()

    response = await openai_provider.complete(TASK)

    assert response.content == "done"
    assert time.monotonic() - started >= 0.3
    assert len(fake_openai.requests) == 2


async def test_a_slow_server_is_a_timeout(fake_openai: FakeOpenAI) -> None:
    provider = provider_on(fake_openai, timeout_s=0.5, max_retries=0)
    fake_openai.script([{"content": "late", "delay_s": 3}])

    with pytest.raises(LLMTimeout) as caught:
        await provider.complete(TASK)

    assert caught.value.code == "llm_timeout"
    assert http_status(caught.value) == HTTPStatus.GATEWAY_TIMEOUT
    assert "0.5 s" in caught.value.message
    assert len(fake_openai.requests) == 1


async def test_a_dropped_connection_is_unavailable_after_the_retries(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"drop": True}] * 3)

    with pytest.raises(LLMUnavailable, match="Could not reach the model endpoint"):
        await openai_provider.complete(TASK)

    assert len(fake_openai.requests) == 3


async def test_a_refused_connection_is_unavailable() -> None:
    provider = OpenAIProvider(
        base_url=f"http://127.0.0.1:{free_port()}/v1",
        api_key=None,
        model="m",
        max_retries=0,
    )

    with pytest.raises(LLMUnavailable) as caught:
        await provider.complete(TASK)

    assert caught.value.details["status"] is None


async def test_a_client_error_is_final_and_carries_the_server_message(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script(
        [{"status": 400, "message": "This model's maximum context length is 8192 tokens"}, "x"]
    )

    with pytest.raises(LLMUnavailable) as caught:
        await openai_provider.complete(TASK)

    assert "400 Bad Request" in caught.value.message
    assert "maximum context length is 8192 tokens" in caught.value.message
    assert caught.value.details["status"] == 400
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize("body", ["this is not JSON", '{"object": "something else"}'])
async def test_a_malformed_answer_is_unavailable(fake_openai: FakeOpenAI, body: str) -> None:
    provider = provider_on(fake_openai, max_retries=0)
    fake_openai.script([{"body": body}])

    with pytest.raises(LLMUnavailable, match="malformed"):
        await provider.complete(TASK)


async def test_the_api_key_never_appears_in_errors_or_logs(fake_openai: FakeOpenAI) -> None:
    secret = "sk-very-secret-0123456789"
    provider = provider_on(fake_openai, api_key=secret, max_retries=0)
    fake_openai.script([{"status": 401, "message": f"Incorrect API key provided: {secret}."}])

    with structlog.testing.capture_logs() as logs, pytest.raises(LLMUnavailable) as caught:
        await provider.complete(TASK)

    error = caught.value
    assert secret not in str(error)
    assert secret not in json.dumps(error.details)
    assert "Incorrect API key provided: [redacted]" in error.message
    assert "LLM_API_KEY" in error.message
    assert secret not in repr(logs)
    assert secret not in json.dumps(provider.describe())


async def test_calls_are_logged_without_message_contents(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script(
        [
            {"status": 503},
            {
                "content": "the private answer",
                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
            },
        ]
    )
    messages: list[ChatMessage] = [{"role": "user", "content": "my private question"}]

    with structlog.testing.capture_logs() as logs:
        await openai_provider.complete(messages)

    [finished] = [log for log in logs if log["event"] == "llm_call_finished"]
    assert finished["model"] == "fake-model"
    assert finished["prompt_tokens"] == 3
    assert finished["completion_tokens"] == 4
    assert finished["attempt"] == 2
    assert finished["latency_ms"] >= 0
    assert "private" not in repr(logs)


def test_describe_names_the_endpoint_without_credentials() -> None:
    provider = OpenAIProvider(
        base_url="https://user:pw@llm.example.com/v1/", api_key="sk-abc", model="gpt-4o-mini"
    )

    assert provider.describe() == {
        "provider": "openai",
        "model": "gpt-4o-mini",
        "base_url": "https://llm.example.com/v1",
    }


# -- OpenAIProvider: cancellation -----------------------------------------------------------


async def test_cancelling_the_awaiting_task_abandons_the_request(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"content": "slow", "delay_s": 3}])
    task = asyncio.create_task(openai_provider.complete(TASK))
    await fake_openai.wait_for_request()
    started = time.monotonic()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task

    assert time.monotonic() - started < 1
    await wait_for_disconnect(fake_openai)


async def test_cancelling_during_the_sdk_s_retry_wait_sends_no_more_requests(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"status": 503, "headers": {"Retry-After": "2"}}, "too late"])
    task = asyncio.create_task(openai_provider.complete(TASK))
    await fake_openai.wait_for_request()
    await asyncio.sleep(0.2)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task

    await asyncio.sleep(2.5)
    assert len(fake_openai.requests) == 1


async def test_cancelling_the_consumer_between_chunks_closes_the_stream(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"chunks": ["first ", "second ", "third"], "chunk_delay_s": 0.5}])
    first = asyncio.Event()
    deltas: list[str] = []

    async def consume() -> None:
        async for chunk in openai_provider.stream(TASK):
            deltas.append(chunk.delta)
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task

    assert deltas == ["first "]
    await wait_for_disconnect(fake_openai)


async def test_closing_a_stream_cancelled_elsewhere_closes_its_response(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    # The consumer is cancelled while it works on a delta (recording it), not while it waits
    # for the stream: closing the generator, as aclosing() does, closes the HTTP response.
    fake_openai.script([{"chunks": ["first ", "second ", "third"], "chunk_delay_s": 0.5}])
    working = asyncio.Event()

    async def consume() -> None:
        async with aclosing(openai_provider.stream(TASK)) as stream:
            async for _ in stream:
                working.set()
                await asyncio.sleep(30)

    task = asyncio.create_task(consume())
    await working.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task

    await wait_for_disconnect(fake_openai)


async def test_cancelling_a_task_waiting_for_the_first_chunk_closes_the_stream(
    fake_openai: FakeOpenAI, openai_provider: OpenAIProvider
) -> None:
    fake_openai.script([{"content": "slow start", "delay_s": 3}])

    async def consume() -> list[LLMChunk]:
        return [chunk async for chunk in openai_provider.stream(TASK)]

    task = asyncio.create_task(consume())
    await fake_openai.wait_for_request()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task

    await wait_for_disconnect(fake_openai)


# -- OfflineProvider ------------------------------------------------------------------------


def user(content: str) -> list[ChatMessage]:
    return [
        {"role": "system", "content": "You are DevAssist."},
        {"role": "user", "content": content},
    ]


def action_args(content: str) -> dict[str, Any]:
    """The tool call of a ReAct reply: ``Action: tool:<name>`` then ``args: <json>``."""
    lines = content.splitlines()
    assert lines[0].startswith("Thought: ")
    assert lines[1] == "Action: tool:execute_code"
    assert lines[2].startswith("args: ")
    args: dict[str, Any] = json.loads(lines[2].removeprefix("args: "))
    return args


def final_answer(content: str) -> str:
    thought, _, answer = content.partition("\nAction: final: ")
    assert thought.startswith("Thought: ")
    assert answer
    return answer


def after_run(task: str, observation: dict[str, Any]) -> list[ChatMessage]:
    return [
        *user(task),
        {"role": "assistant", "content": "Thought: run it\nAction: tool:execute_code\nargs: {}"},
        {"role": "user", "content": "Observation: " + json.dumps(observation)},
    ]


@pytest.mark.parametrize(
    ("task", "code"),
    [
        ("Please run this:\n```python\nprint(1+1)\n```\nthanks", "print(1+1)"),
        ("```\nfor i in range(2):\n    print(i)\n```", "for i in range(2):\n    print(i)"),
        ("执行：print(1+1)", "print(1+1)"),
        ("执行: print('你好')", "print('你好')"),
        ("run: print(2)", "print(2)"),
        ("EXECUTE: x=1", "x=1"),
        ("Execute:\n```py\nprint(3)\n```", "print(3)"),
    ],
)
async def test_offline_runs_the_code_a_task_gives(task: str, code: str) -> None:
    response = await OfflineProvider().complete(user(task))

    assert response.content.startswith("Thought: I will run the code with execute_code.\n")
    assert action_args(response.content) == {"code": code, "timeout_s": 10}


async def test_offline_keeps_non_ascii_code_readable() -> None:
    response = await OfflineProvider().complete(user("执行：print('你好')"))

    assert "print('你好')" in response.content


@pytest.mark.parametrize("task", ["What is Django?", "```bash\nls -la\n```", "dryrun: nothing"])
async def test_offline_says_no_model_is_configured(task: str) -> None:
    response = await OfflineProvider().complete(user(task))

    assert response.content.startswith("Thought: No language model is configured.\n")
    answer = final_answer(response.content)
    assert "No language model is configured" in answer
    assert "LLM_BASE_URL" in answer
    assert "run:" in answer


async def test_offline_says_no_model_is_configured_in_chinese() -> None:
    response = await OfflineProvider().complete(user("什么是 Django？"))

    answer = final_answer(response.content)
    assert "尚未配置语言模型" in answer
    assert "LLM_BASE_URL" in answer
    assert "执行：" in answer


async def test_offline_answers_with_the_output_of_the_run() -> None:
    observation = {"stdout": "2\n", "stderr": "", "exit_code": 0, "timed_out": False}

    response = await OfflineProvider().complete(after_run("run: print(1+1)", observation))

    assert response.content == (
        "Thought: The code ran.\nAction: final: The code printed:\n```\n2\n```"
    )


async def test_offline_reports_stderr_exit_code_and_timeout() -> None:
    observation = {
        "stdout": "partial\n",
        "stderr": "Traceback ...\nKeyboardInterrupt\n",
        "exit_code": 137,
        "timed_out": True,
    }

    answer = final_answer(
        (await OfflineProvider().complete(after_run("run: f()", observation))).content
    )

    assert "timed out" in answer
    assert "partial" in answer
    assert "KeyboardInterrupt" in answer
    assert "137" in answer


async def test_offline_answers_with_the_safety_report_when_the_code_was_blocked() -> None:
    report = "Safety check BLOCKED:\n  [BLOCKED] (line 1) os.system is blocked: no processes."
    observation = {"blocked": True, "safety": {"blocked": True, "text": report, "findings": []}}

    response = await OfflineProvider().complete(after_run("run: import os", observation))

    answer = final_answer(response.content)
    assert "blocked" in answer
    assert report in answer


async def test_offline_quotes_search_results_with_their_sources() -> None:
    observation = {
        "results": [
            {"source": "docs/django.md", "content": "Django is a web framework."},
            {"source": "docs/orm.md", "content": "The ORM maps models to tables."},
        ]
    }
    task = "What are Django and its ORM?"

    answer = final_answer((await OfflineProvider().complete(after_run(task, observation))).content)

    assert answer.startswith("No language model is configured, so here is what the documentation")
    assert "> Django is a web framework. [1]" in answer
    assert "> The ORM maps models to tables. [2]" in answer
    assert answer.endswith("Sources:\n1. docs/django.md\n2. docs/orm.md")


def offers_search(task: str) -> list[ChatMessage]:
    """A run's messages that list ``search_docs`` among the tools, as the agent's prompt does."""
    return [
        {"role": "system", "content": "Tools:\n- search_docs: Search the documentation."},
        {"role": "user", "content": task},
    ]


@pytest.mark.usefixtures("guide")
@pytest.mark.parametrize(
    "greeting", ["hello", "Hi there!", "thanks a lot", "Good morning", "who are you?"]
)
async def test_offline_answers_small_talk_that_no_model_is_configured(greeting: str) -> None:
    response = await OfflineProvider().complete(offers_search(greeting))

    # No search for quotes that could only be irrelevant: the answer says what it is.
    assert response.content.startswith("Thought: No language model is configured.\n")
    answer = final_answer(response.content)
    assert answer.startswith("No language model is configured")
    assert "search the documentation" in answer
    assert "run Python code" in answer
    assert "`LLM_BASE_URL`" in answer


@pytest.mark.usefixtures("guide")
@pytest.mark.parametrize("greeting", ["你好", "你好！", "谢谢", "您好，你是谁？"])
async def test_offline_answers_chinese_small_talk_in_chinese(greeting: str) -> None:
    answer = final_answer((await OfflineProvider().complete(offers_search(greeting))).content)

    assert answer.startswith("尚未配置语言模型")
    assert "搜索文档" in answer
    assert "`LLM_BASE_URL`" in answer


async def test_offline_says_nothing_matched_and_that_no_model_is_configured() -> None:
    observation = {
        "collection": "team_docs",
        "results": [],
        "message": "Nothing in 'team_docs' matches 'kubernetes'.",
    }

    answer = final_answer(
        (await OfflineProvider().complete(after_run("kubernetes helm", observation))).content
    )

    assert answer.startswith(
        "Nothing in the documentation (team_docs) matches this question, and no language model "
        "is configured"
    )
    assert "`LLM_BASE_URL`" in answer


async def test_offline_does_not_quote_passages_that_share_nothing_with_the_question() -> None:
    observation = {
        "results": [{"source": "docs/weather.md", "content": "It rains a lot in autumn."}]
    }

    answer = final_answer(
        (await OfflineProvider().complete(after_run("如何配置沙箱？", observation))).content
    )

    assert answer.startswith("文档中没有与这个问题相关的内容，而且尚未配置语言模型")
    assert "rains" not in answer


async def test_offline_links_the_page_about_models_when_the_docs_hold_it(
    knowledge: Any, tmp_path: Any, settings: Any
) -> None:
    from agent.knowledge.ingest import ingest_paths

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "llm.md").write_text("# Models\n\nSet LLM_BASE_URL.\n")
    (tmp_path / "README.md").write_text("# DevAssist\n")
    ingest_paths(paths=[tmp_path / "README.md", tmp_path / "docs"], collection="devassist_docs")
    settings.KNOWLEDGE_DEFAULT_COLLECTION = "devassist_docs"

    answer = final_answer((await OfflineProvider().complete(user("What is Django?"))).content)

    assert "see [docs/llm.md](/docs/devassist_docs/docs/llm.md)." in answer


async def test_offline_summarises_any_other_observation() -> None:
    answer = final_answer(
        (await OfflineProvider().complete(after_run("x", {"answer": 42}))).content
    )

    assert '"answer": 42' in answer


async def test_offline_treats_a_new_task_after_an_observation_as_new() -> None:
    observation = {"stdout": "2\n", "stderr": "", "exit_code": 0}
    messages: list[ChatMessage] = [
        *after_run("run: print(1+1)", observation),
        {"role": "assistant", "content": "Thought: The code ran.\nAction: final: 2"},
        {"role": "user", "content": "run: print(3)"},
    ]

    response = await OfflineProvider().complete(messages)

    assert action_args(response.content)["code"] == "print(3)"


@pytest.mark.parametrize("task", ["run: print(1)", "What is Django?", "你好，世界是什么？"])
async def test_offline_stream_joins_to_the_completion(task: str) -> None:
    provider = OfflineProvider()

    deltas, response = await collect(provider, user(task))

    assert len(deltas) > 3
    assert "".join(deltas) == response.content == (await provider.complete(user(task))).content


async def test_offline_honours_stop_sequences() -> None:
    response = await OfflineProvider().complete(user("Hello"), stop=["\nAction:"])

    assert response.content == "Thought: No language model is configured."


async def test_offline_response_metadata() -> None:
    provider = OfflineProvider(
        base_url=None, api_key=None, model="gpt-4o-mini", timeout_s=60, max_retries=2
    )

    response = await provider.complete(user("run: print(1)"))

    assert provider.model == response.model == "offline"
    assert provider.describe() == {"provider": "offline", "model": "offline"}
    assert response.finish_reason == "stop"
    # It counts no tokens: unknown, not an estimate passed off as a count.
    assert response.usage is None


# -- get_llm() ------------------------------------------------------------------------------


@pytest.fixture
def fresh_llm() -> Iterator[None]:
    get_llm.cache_clear()
    yield
    get_llm.cache_clear()


@pytest.mark.usefixtures("fresh_llm")
def test_get_llm_is_offline_without_a_base_url() -> None:
    if os.environ.get("LLM_BASE_URL") or os.environ.get("LLM_BACKEND"):
        pytest.skip("the environment configures a model")

    llm = get_llm()

    assert isinstance(llm, OfflineProvider)
    assert get_llm() is llm


@pytest.mark.usefixtures("fresh_llm")
def test_get_llm_builds_the_configured_backend(fake_openai: FakeOpenAI) -> None:
    config = {
        "BACKEND": "agent.llm.openai_provider.OpenAIProvider",
        "OPTIONS": {
            "base_url": fake_openai.base_url,
            "api_key": "k",
            "model": "served-model",
            "timeout_s": 3.0,
            "max_retries": 1,
            "temperature": 0.2,
            "max_tokens": 256,
        },
    }
    with override_settings(LLM=config):
        get_llm.cache_clear()
        llm = get_llm()

    assert isinstance(llm, OpenAIProvider)
    assert llm.describe() == {
        "provider": "openai",
        "model": "served-model",
        "base_url": fake_openai.base_url,
    }
    assert (llm.timeout_s, llm.max_retries, llm.temperature, llm.max_tokens) == (3.0, 1, 0.2, 256)


async def test_offline_answers_the_answer_now_request_from_the_observations() -> None:
    from agent.prompt import final_answer_prompt

    observation = 'Observation: {"exit_code": 0, "stdout": "2\\n"}'
    messages: list[ChatMessage] = [
        {"role": "user", "content": "run: print(1+1)"},
        {"role": "assistant", "content": "Action: tool:execute_code"},
        {"role": "user", "content": observation},
        {"role": "user", "content": final_answer_prompt()},
    ]
    response = await OfflineProvider().complete(messages)
    assert "Action: final:" in response.content
    assert "2" in response.content
