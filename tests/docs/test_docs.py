"""The README and the docs site agree with the code: the README links every page of the site, and the
command lines it shows parse with the real command line (options that exist, required values given)."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from conftest import REPO

README = (REPO / "README.md").read_text()


def _nav_pages(nav) -> list[str]:
    pages = []
    for item in nav:
        for value in item.values() if isinstance(item, dict) else [item]:
            pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_readme_links_every_page_of_the_site():
    # mkdocs.yml may carry python tags; only the nav is read here
    text = (REPO / "mkdocs.yml").read_text()
    nav = yaml.safe_load(text[text.index("\nnav:") :])["nav"]
    pages = _nav_pages(nav)
    assert len(pages) > 20
    linked = set(re.findall(r"\]\(docs/([^)#]+)", README))
    assert sorted(p for p in pages if p not in linked) == []
    assert sorted(p for p in linked if not (REPO / "docs" / p).exists() and not p.endswith("/")) == []


WALKTHROUGH = (REPO / "docs" / "platforms" / "android-walkthrough.md").read_text()


def _command_lines(*texts: str, inline: bool = False) -> list[str]:
    """The ``tvmgen`` command lines of ``texts``' sh blocks (``inline``: also of their inline code, where
    every one is a whole command, as in the README's table)."""
    lines = []
    for text in texts:
        for cell in re.findall(r"`(tvmgen [^`]+)`", text) if inline else []:
            lines += [part.strip() for part in cell.split("&&") if part.strip().startswith("tvmgen ")]
        for block in re.findall(r"```sh\n(.*?)```", text, re.S):
            lines += [ln.split("#")[0].strip() for ln in block.splitlines() if ln.strip().startswith("tvmgen ")]
    return sorted(ln for ln in set(lines) if "COMMAND" not in ln)  # prose's `tvmgen COMMAND --help`


def _readme_command_lines() -> list[str]:
    return _command_lines(README, inline=True)


@pytest.mark.parametrize("line", _readme_command_lines() + _command_lines(WALKTHROUGH))
def test_readme_and_walkthrough_command_lines_parse(line):
    import click

    from tvmgen.cli import cli

    args = shlex.split(line)[1:]
    with click.Context(cli) as ctx:
        words = list(args)
        command: click.Command = cli
        while isinstance(command, click.Group):
            name, sub, words = command.resolve_command(ctx, words)
            assert sub is not None, f"no command {name!r} in {line!r}"
            command = sub
        try:  # raises on an unknown option, a bad choice or a missing value
            command.make_context(command.name or "", words)
        except (click.BadParameter, FileNotFoundError) as e:  # an example's input file: not here, and fine
            assert "does not exist" in str(e) or isinstance(e, FileNotFoundError), e


def test_the_readme_shows_commands():
    assert len(_readme_command_lines()) >= 12


def _suggested_commands() -> list[tuple[str, str]]:
    """(file:line, command line) for every ``tvmgen ...`` command a message or help text in the package
    suggests, read from its string literals (one literal each)."""
    import ast

    found = []
    for path in sorted((REPO / "generator" / "tvmgen").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for m in re.finditer(
                    r"tvmgen ([a-z][a-z-]*(?: [a-z][a-z-]*)?)((?: +(?:--?[a-z][\w-]*|[^\s`'\",;)]+))*)", node.value
                ):
                    found.append((f"{path.relative_to(REPO)}:{node.lineno}", m.group(0)))
    return found


def _options_of(words: list[str]):
    import click

    from tvmgen.cli import cli

    with click.Context(cli) as ctx:
        command: click.Command = cli
        while isinstance(command, click.Group) and words and not words[0].startswith("-"):
            sub = command.get_command(ctx, words[0])
            if sub is None:
                return None, words
            command, words = sub, words[1:]
        opts = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
        return opts, words


def test_every_suggested_command_names_options_that_exist():
    """A fix that names an option the command lacks sends the user in a circle (`app --objects-only`)."""
    checked, wrong = 0, []
    for where, line in _suggested_commands():
        words = line.split()[1:]
        opts, rest = _options_of(words)
        if opts is None:
            continue  # "tvmgen" in prose, not a command
        checked += 1
        for w in rest:
            if re.match(r"--?[A-Za-z]", w) and w.split("=")[0] not in opts:
                wrong.append(f"{where}: {line!r}: {w.split('=')[0]}")
    assert checked > 30
    assert wrong == []
