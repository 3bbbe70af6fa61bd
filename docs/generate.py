"""Write the generated parts of the reference pages in docs/pages/ from the code they describe.

A generated part sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in a page; the prose
around it is written by hand.  The parts:

- ``cli``: every command's arguments, from `xlayer.cli.main.build_parser()`;
- ``schema``: the packet table, from `parsers.schema.markdown_table()`;
- ``hoststate``: the host TCP state table, from `parsers.hoststate.common.markdown_table()`;
- ``metrics``: every metric table, from `xlayer.metrics.markdown_tables()`;
- ``causes``: every cause in `xlayer.attribution.causes.CAUSES`, from its NAME, MEANING and docstring.

    python docs/generate.py           # rewrite the stale parts
    python docs/generate.py --check   # say which pages are stale, exit 1 if any (tests/test_docs.py)

The pages are committed, so the site builds without running this and the repository shows them.
"""
from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

DOCS = Path(__file__).resolve().parent
PAGES = DOCS / "pages"
REPO = DOCS.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _plain(text: str, pipes: bool = False) -> str:
    """Return text outside code spans safe in Markdown: no raw HTML, no emphasis, pipes escaped if asked."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return text.replace("|", "\\|") if pipes else text


def _md(text: str, pipes: bool = False) -> str:
    """Return free text from code (help strings, docstrings) safe to put in Markdown; code spans kept as they are.

    (mkdocs' Markdown shows a code span's text literally, a pipe in a table cell included.)
    """
    parts = text.split("`")
    if len(parts) % 2 == 0:       # an unpaired backtick: no code spans
        return _plain(text, pipes)
    return "`".join(p if i % 2 else _plain(p, pipes) for i, p in enumerate(parts))


def _cell(text: str, code: bool = False) -> str:
    """Return text for one cell of a Markdown table: one line; `code` puts it in a code span."""
    text = " ".join(text.split())
    return f"`{text}`" if code else _md(text, pipes=True)


def _paragraphs(text: str) -> str:
    """Return a docstring or description with its lines joined into paragraphs."""
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", inspect.cleandoc(text))]
    return "\n\n".join(_md(p) for p in paras if p)


def _subcommands(p: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Yield (name, one-line help, parser) of each subcommand of `p`, in the order they were added."""
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in a._choices_actions}
            for name, sub in a.choices.items():
                yield name, helps.get(name, ""), sub


def _metavar(a: argparse.Action) -> str:
    """Return how an argument's value is written in a synopsis ('' for a flag)."""
    if a.nargs == 0:
        return ""
    if a.metavar is not None:
        mv = a.metavar
        return " ".join(mv) if isinstance(mv, tuple) else mv
    if a.choices is not None:
        return "{" + ",".join(map(str, a.choices)) + "}"
    name = a.dest.upper() if a.option_strings else a.dest  # as argparse writes them
    return " ".join([name] * a.nargs) if isinstance(a.nargs, int) else name


def _arguments(p: argparse.ArgumentParser) -> list[argparse.Action]:
    """Return the arguments of `p` a reader types (no help flag, no subcommand action)."""
    return [a for a in p._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and a.help != argparse.SUPPRESS]


def _synopsis(prog: str, p: argparse.ArgumentParser) -> str:
    """Return a one-line synopsis of a command: positionals, then options with their values."""
    parts = [prog]
    for a in _arguments(p):
        mv = _metavar(a)
        if a.option_strings:
            opt = max(a.option_strings, key=len) + (f" {mv}" if mv else "")
            parts.append(opt if a.required else f"[{opt}]")
        else:
            parts.append(f"[{mv}]" if a.nargs in ("?", "*") else mv)
    return " ".join(parts)


def _argument_rows(p: argparse.ArgumentParser) -> list[str]:
    """Return the Markdown table rows of a command's arguments."""
    rows = []
    for a in _arguments(p):
        mv = _metavar(a)
        if a.option_strings:
            name = ", ".join(a.option_strings) + (f" {mv}" if mv else "")
        else:
            name = mv
        text = (a.help or "") % {"default": a.default, "prog": p.prog} if a.help else ""
        if a.choices is not None and a.metavar is not None and not all(str(c) in text for c in a.choices):
            text = f"{text} (one of: {', '.join(map(str, a.choices))})".strip()
        if isinstance(a, argparse._AppendAction) and "repeatable" not in text:
            text = f"{text}; repeatable".lstrip("; ")
        if a.default not in (None, False, [], argparse.SUPPRESS) and "default" not in text:
            text = f"{text} (default: {a.default})".strip()
        rows.append(f"| {_cell(name, code=True)} | {_cell(text)} |")
    return rows


def cli_reference() -> str:
    """Return every `xlayer` command's synopsis, description and arguments as Markdown."""
    from xlayer.cli.main import build_parser

    out: list[str] = []

    def command(prog: str, helptext: str, p: argparse.ArgumentParser, depth: int) -> None:
        out.append(f"{'#' * depth} `{prog}`")
        if helptext:
            out.append(_md(helptext[0].upper() + helptext[1:]) + ".")
        subs = list(_subcommands(p))
        if not subs or _arguments(p):
            out.append(f"```\n{_synopsis(prog, p)}\n```")
        if p.description:
            out.append(_paragraphs(p.description))
        if _arguments(p):
            out.append("| argument | meaning |\n|---|---|\n" + "\n".join(_argument_rows(p)))
        for name, h, sub in subs:
            command(f"{prog} {name}", h, sub, depth + 1)

    for name, h, sub in _subcommands(build_parser()):
        command(f"xlayer {name}", h, sub, 2)
    return "\n\n".join(out)


def packet_schema() -> str:
    """Return the packet table's schema as Markdown."""
    from parsers.schema import markdown_table

    return markdown_table()


def hoststate_schema() -> str:
    """Return the host TCP state table's schema as Markdown."""
    from parsers.hoststate.common import markdown_table

    return markdown_table()


def metric_tables() -> str:
    """Return every metric table's schema as Markdown."""
    from xlayer.metrics import markdown_tables

    return markdown_tables()


def cause_reference() -> str:
    """Return every registered cause: its name, one-line meaning and module docstring."""
    from xlayer.attribution.causes import CAUSES

    out = []
    for m in CAUSES:
        meaning = getattr(m, "MEANING", "")
        out.append(f"### `{m.NAME}`\n\n" + (f"*{_md(meaning)}* (`{m.__name__}`)\n\n" if meaning else "")
                   + _paragraphs(m.__doc__ or ""))
    return "\n\n".join(out)


BLOCKS: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "schema": packet_schema,
    "hoststate": hoststate_schema,
    "metrics": metric_tables,
    "causes": cause_reference,
}


def block_re(name: str) -> re.Pattern[str]:
    """Return the pattern of a generated part in a page (the markers and what is between them)."""
    return re.compile(rf"(<!-- {name}:begin -->\n)(.*?)(<!-- {name}:end -->)", re.S)


def render(text: str, generated: dict[str, str]) -> str:
    """Return a page's text with every generated part it holds replaced by `generated[name]`."""
    for name, body in generated.items():
        text = block_re(name).sub(lambda m, b=body: m.group(1) + b.strip() + "\n" + m.group(3), text)
    return text


def generate() -> dict[str, str]:
    """Return every generated part by name."""
    return {name: fn() for name, fn in BLOCKS.items()}


def stale_pages(write: bool) -> list[Path]:
    """Return the pages whose generated parts differ from the code's; with `write`, rewrite them."""
    generated = generate()
    stale = []
    for page in sorted(PAGES.rglob("*.md")):
        old = page.read_text()
        new = render(old, generated)
        if new != old:
            stale.append(page)
            if write:
                page.write_text(new)
    return stale


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with --check, only name) the pages whose generated parts are stale."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = ap.parse_args(argv)
    stale = stale_pages(write=not args.check)
    for page in stale:
        print(f"{'stale' if args.check else 'wrote'}: {page.relative_to(REPO)}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
