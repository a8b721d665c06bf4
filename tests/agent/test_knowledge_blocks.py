"""Markdown blocks: splitting a chunk into whole blocks, and cutting without breaking one."""

from __future__ import annotations

from agent.knowledge.blocks import Block, clip_lines, clip_markdown, cut_block, split_blocks

DOC = """Intro line one
line two.

- first item
- second item
  more of it

  a paragraph in it
- third

```python
print(1)

print(2)
```

| name | value |
|------|-------|
| a    | 1     |
## A heading
~~~
tilde code
~~~"""


def test_blocks_are_whole_paragraphs_lists_code_tables_and_headings() -> None:
    assert [(b.kind, b.text.split("\n")[0]) for b in split_blocks(DOC)] == [
        ("paragraph", "Intro line one"),
        ("list", "- first item"),
        ("code", "```python"),
        ("table", "| name | value |"),
        ("heading", "## A heading"),
        ("code", "~~~"),
    ]
    blocks = split_blocks(DOC)
    assert blocks[1].text.endswith("  a paragraph in it\n- third")
    assert blocks[2].text == "```python\nprint(1)\n\nprint(2)\n```"


def test_a_code_block_left_open_is_closed_and_an_empty_one_dropped() -> None:
    blocks = split_blocks("```bash\n```\n\nText.\n\n```python\nprint(1)\n\n")

    assert blocks == [Block("paragraph", "Text."), Block("code", "```python\nprint(1)\n```")]


def test_a_cut_code_block_keeps_its_fence_and_is_closed() -> None:
    code = Block("code", "```python\n" + "\n".join(f"x_{i} = {i}" for i in range(50)) + "\n```")

    cut = cut_block(code, 100)

    assert cut is not None
    assert cut.text.startswith("```python\nx_0 = 0\n")
    assert cut.text.endswith("\n```")
    assert len(cut.text) <= 100
    assert all(line.startswith(("x_", "```")) for line in cut.text.split("\n"))


def test_a_cut_table_keeps_its_header_and_whole_rows() -> None:
    rows = "\n".join(f"| row {i} | {i} |" for i in range(30))
    table = Block("table", f"| name | n |\n|---|---|\n{rows}")

    cut = cut_block(table, 90)

    assert cut is not None
    lines = cut.text.split("\n")
    assert lines[:3] == ["| name | n |", "|---|---|", "| row 0 | 0 |"]
    assert all(line.endswith("|") for line in lines)


def test_a_paragraph_is_cut_at_a_sentence_or_a_word() -> None:
    text = "First sentence is here. " * 10

    cut = cut_block(Block("paragraph", text.strip()), 80)

    assert cut is not None
    assert cut.text.endswith("here. …")
    assert len(cut.text) <= 80


def test_no_room_for_a_line_of_code_leaves_the_block_out() -> None:
    assert cut_block(Block("code", "```python\n" + "x" * 500 + "\n```"), 20) is None


def test_clipping_never_ends_inside_a_fence_or_a_table() -> None:
    code = "\n".join(f"value_{i} = {i}" for i in range(100))
    text = f"Intro.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\n{code}\n```\n\nAfter."

    clipped = clip_markdown(text, 300)

    assert len(clipped) <= 300
    table = "| a | b |\n|---|---|\n| 1 | 2 |"
    assert clipped.startswith(f"Intro.\n\n{table}\n\n```python\nvalue_0 = 0\n")
    assert clipped.endswith("\n```\n\n…")
    assert clip_markdown("Short.", 300) == "Short."


def test_source_code_is_clipped_at_lines() -> None:
    code = "\n".join(f"def f{i}(): return {i}" for i in range(50))

    clipped = clip_lines(code, 100)

    assert clipped.endswith("\n…")
    assert all(line.startswith("def f") for line in clipped.split("\n")[:-1])
