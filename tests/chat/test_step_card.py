"""A step's card (``chat/_step.html`` from ``chat.views.step_view``): its arguments as
highlighted code."""

from __future__ import annotations

from django.template.loader import render_to_string

from chat.views import step_view


def card(step: dict[str, object]) -> str:
    return render_to_string("chat/_step.html", {"step": step_view(step)})


def test_execute_codes_code_is_highlighted_python_and_the_rest_json() -> None:
    html = card(
        {
            "tool_name": "execute_code",
            "tool_args": {"code": "print('<b>')", "timeout_s": 5},
            "observation": {"stdout": "<b>\n", "exit_code": 0},
        }
    )

    code = html[html.index('<pre class="highlight step-args-code">') :]
    assert code.startswith('<pre class="highlight step-args-code"><code><span class="tok-nb">print')
    assert "<span class=\"tok-s1\">'&lt;b&gt;'</span>" in code
    assert '<span class="tok-nt">"timeout_s"</span>' in html
    assert '"code"' not in html


def test_other_arguments_are_highlighted_json_and_stay_escaped() -> None:
    html = card({"tool_name": "search_docs", "tool_args": {"query": "<script>x</script>"}})

    assert '<pre class="highlight step-args"><code>' in html
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert "step-args-code" not in html


def test_a_step_without_arguments_shows_none() -> None:
    assert "Arguments" not in card({"tool_name": None, "error": "bad format"})
