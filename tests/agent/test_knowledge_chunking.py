"""Chunking: structure-following parsers per format, packing with overlap, metadata."""

from __future__ import annotations

import hashlib
import itertools

from agent.knowledge.chunking import chunk_document, format_for
from agent.knowledge.text import tokenize

MARKDOWN = """---
layout: page
---
# Guide

Intro paragraph.

## Install

Run `make run`.

```python
# not a heading
print("hi")
```

Setext title
------------

Under the setext heading.
"""


def test_markdown_follows_headings_and_keeps_fenced_code_whole() -> None:
    chunks = chunk_document(text=MARKDOWN, name="guide.md")

    assert [(c.index, c.title, c.section) for c in chunks] == [
        (0, "Guide", "Guide"),
        (1, "Install", "Guide > Install"),
        (2, "Setext title", "Guide > Setext title"),
    ]
    assert "layout" not in chunks[0].text
    assert chunks[1].text.startswith("Install\n\n")
    assert '# not a heading\nprint("hi")' in chunks[1].text
    assert chunks[2].text == "Setext title\n\nUnder the setext heading."


def test_each_chunk_carries_the_hash_of_its_text() -> None:
    for chunk in chunk_document(text=MARKDOWN, name="guide.md"):
        assert chunk.content_hash == hashlib.sha256(chunk.text.encode()).hexdigest()


def test_long_sections_are_split_under_the_limit_with_overlap() -> None:
    paragraphs = [f"Paragraph {i} " + "word " * 60 for i in range(12)]
    text = "# Long\n\n" + "\n\n".join(paragraphs)

    chunks = chunk_document(text=text, name="long.md", max_chars=800, overlap_chars=150)

    assert len(chunks) > 3
    assert all(len(c.text) <= 800 for c in chunks)
    assert all(c.title == "Long" for c in chunks)
    for previous, current in itertools.pairwise(chunks):
        tail = previous.text[-60:].strip()
        assert tail in current.text  # the end of one chunk opens the next
    joined = " ".join(c.text for c in chunks)
    assert all(f"Paragraph {i} " in joined for i in range(12))


def test_a_single_huge_paragraph_is_split_at_sentences() -> None:
    text = " ".join(f"Sentence number {i} says something." for i in range(200))

    chunks = chunk_document(text=text, name="notes.txt", max_chars=500, overlap_chars=0)

    assert len(chunks) > 5
    assert all(len(c.text) <= 500 for c in chunks)
    assert all(c.title == "notes.txt" for c in chunks)
    assert chunks[0].text.split("\n\n", 1)[1].startswith("Sentence number 0 says something.")


def test_a_long_code_block_is_fenced_again_in_every_chunk() -> None:
    code = "\n".join(f"value_{i} = {i}  # a comment that takes room" for i in range(60))
    text = f"# Code\n\nIntro.\n\n```python\n{code}\n```\n\nAfter the code."

    chunks = chunk_document(text=text, name="code.md", max_chars=600, overlap_chars=150)

    with_code = [c.text for c in chunks if "value_" in c.text]
    assert len(with_code) > 2
    for chunk_text in with_code:
        body = chunk_text.split("\n\n", 1)[1]
        # Every piece of code opens with the block's fence and language, and closes it.
        assert body.count("```python\n") == 1
        assert body.count("```") == 2
        assert all(len(c.text) <= 600 for c in chunks)
    # The code's lines all survive, each once, in order.
    lines = [line for c in with_code for line in c.split("\n") if line.startswith("value_")]
    assert lines == code.split("\n")


def test_a_long_table_repeats_its_header_rows_and_overlap_never_cuts_one() -> None:
    rows = "\n".join(f"| row {i} | a value that is long enough {i} |" for i in range(50))
    text = f"# Table\n\n| name | value |\n|------|-------|\n{rows}\n\nThe end."

    chunks = chunk_document(text=text, name="table.md", max_chars=500, overlap_chars=150)

    with_rows = [c.text for c in chunks if "| row " in c.text]
    assert len(with_rows) > 2
    for chunk_text in with_rows:
        table = chunk_text.split("\n\n")[1]
        assert table.startswith("| name | value |\n|------|-------|\n| row ")
    found = [line for c in with_rows for line in c.split("\n") if line.startswith("| row ")]
    assert found == rows.split("\n")


def test_restructuredtext_titles_by_adornment_order() -> None:
    text = (
        "=====\nTitle\n=====\n\nIntro.\n\nSetup\n-----\n\nSteps here.\n\n"
        "Detail\n~~~~~~\n\nFine print.\n\nUsage\n-----\n\nCall it.\n"
    )

    chunks = chunk_document(text=text, name="doc.rst")

    assert [(c.title, c.section) for c in chunks] == [
        ("Title", "Title"),
        ("Setup", "Title > Setup"),
        ("Detail", "Title > Setup > Detail"),
        ("Usage", "Title > Usage"),
    ]


def test_html_is_parsed_not_pattern_matched() -> None:
    html = (
        "<html><head><title>Ops Manual</title><style>h1 {color: red}</style></head><body>"
        "<h1>Backups</h1><p>Run &lt;backup&gt; nightly.<br>Keep 7 days.</p>"
        "<script>alert('x')</script><h2>Restore</h2><ul><li>Stop the app</li>"
        "<li>Load the dump</li></ul><pre>  pg_restore \\\n    dump.sql</pre></body></html>"
    )

    chunks = chunk_document(text=html, name="manual.html")

    assert [(c.title, c.section) for c in chunks] == [
        ("Backups", "Backups"),
        ("Restore", "Backups > Restore"),
    ]
    assert "Run <backup> nightly.\nKeep 7 days." in chunks[0].text
    assert "alert" not in " ".join(c.text for c in chunks)
    assert "color" not in " ".join(c.text for c in chunks)
    assert "Stop the app\n\nLoad the dump" in chunks[1].text
    assert "  pg_restore \\\n    dump.sql" in chunks[1].text


def test_python_files_split_into_docstring_functions_and_classes() -> None:
    source = (
        '"""Billing helpers.\n\nMoney is in cents."""\n\nimport math\n\nRATE = 3\n\n\n'
        "@cache\ndef total(items):\n    return sum(items)\n\n\n"
        'class Invoice:\n    """An invoice."""\n\n    def pay(self):\n        pass\n'
    )

    chunks = chunk_document(text=source, name="billing.py")

    assert [c.title for c in chunks] == ["billing.py", "billing.py", "def total", "class Invoice"]
    assert "Money is in cents." in chunks[0].text
    assert chunks[1].text == "billing.py\n\nimport math\nRATE = 3"
    assert chunks[2].text.startswith("def total\n\n@cache\ndef total(items):")
    assert "def pay(self):" in chunks[3].text


def test_python_that_does_not_parse_is_chunked_as_text() -> None:
    chunks = chunk_document(text="def broken(:\n    pass\n", name="bad.py")

    assert len(chunks) == 1
    assert "def broken(:" in chunks[0].text


def test_blank_documents_have_no_chunks() -> None:
    assert chunk_document(text="  \n\n\t\n", name="empty.md") == []


def test_formats_by_suffix() -> None:
    assert format_for("a/B.MD") == "markdown"
    assert format_for("x.rst") == "rst"
    assert format_for("x.htm") == "html"
    assert format_for("x.py") == "python"
    assert format_for("x.txt") == "text"
    assert format_for("logo.png") is None
    assert format_for("Makefile") is None


def test_tokenizer_stems_english_and_bigrams_chinese() -> None:
    assert tokenize("Configuring the configured sandboxes") == ["configur", "configur", "sandbox"]
    assert tokenize("SANDBOX_MEMORY_MB") == ["sandbox_memory_mb", "sandbox", "memori", "mb"]
    assert tokenize("如何配置沙箱") == ["何配", "配置", "置沙", "沙箱"]
    assert tokenize("docker容器") == ["docker", "容器"]
    assert tokenize("!!! ...") == []
