"""The shared Markdown renderer (``devassist.markdown``): what its code blocks offer."""

from __future__ import annotations

from devassist.markdown import render_markdown


def test_a_blank_python_block_offers_no_run_button() -> None:
    html = render_markdown("```python\n\n```\n\n```python\nprint(1)\n```")

    assert html.count('class="code-copy"') == 2
    assert html.count('class="code-run"') == 1


def test_relative_links_stay_links() -> None:
    html = render_markdown("[the guide](/docs/devassist_docs/docs/llm.md#chunk-2)")

    assert 'href="/docs/devassist_docs/docs/llm.md#chunk-2"' in html


def test_an_untagged_block_is_output_and_offers_no_run_button() -> None:
    html = render_markdown("It printed:\n\n```\n42\n```\n\n    indented\n\n```py\nprint(42)\n```")

    assert html.count('class="code-copy"') == 3
    assert html.count('class="code-run"') == 1
