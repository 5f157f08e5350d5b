"""Every subcommand and option of the CLI says what it does (a subcommand added later included)."""

import argparse

from thunder_overlay.cli import build_parser


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_subcommand_has_a_help_line_and_a_description():
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    assert set(helps) == set(subcommands()) and {"status", "diff", "verify"} <= set(helps)
    for name, parser in subcommands().items():
        assert helps[name] and len(helps[name]) > 10, name
        assert parser.description and len(parser.description) > 40, f"`{name} --help` describes nothing"


def test_every_option_has_help():
    for name, parser in subcommands().items():
        for option in parser._actions:
            if not isinstance(option, argparse._HelpAction):
                assert option.help and len(option.help) > 10, f"{name} {option.option_strings}"


def test_help_runs_for_every_subcommand(capsys):
    for name in subcommands():
        try:
            build_parser().parse_args([name, "--help"])
        except SystemExit as e:
            assert e.code == 0
        assert capsys.readouterr().out.startswith(f"usage: thunder-overlay {name}")
