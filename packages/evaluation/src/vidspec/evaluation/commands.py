"""Subcommands the evaluation package adds to the ``vidspec`` command.

``vidspec data`` builds datasets; its only dataset so far is SynthVid::

    vidspec data synthvid --out data/cache/synthvid --num-videos 1000 --seed 0
    vidspec data synthvid --out data/cache/sv-small --num-videos 200 --seed 1 --preset easy --frames 8 --size 64x64 \\
        --split train=0.9,test=0.1 --styles alpha:1,beta:1 --workers 2
    vidspec data synthvid --help            # every option, from SynthVidConfig's field docs
    vidspec data synthvid --print_config    # the resolved config as YAML

Parsers are generated with jsonargparse from typed dataclasses; bad values raise
:class:`~vidspec.decoding.errors.ConfigError`, which the top-level command turns into exit 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from vidspec.decoding.cli import normalize_flags, one_line
from vidspec.decoding.errors import ConfigError


def _synthvid(argv: list[str]) -> int:
    from dataclasses import fields

    from jsonargparse import ActionConfigFile, ArgumentParser

    from vidspec.evaluation.synthvid.dataset import SynthVidConfig, generate_synthvid

    parser = ArgumentParser(
        prog="vidspec data synthvid",
        description="Generate the SynthVid dataset (videos, captions, questions, facts, tokenizer).",
        exit_on_error=False,
        default_env=False,
    )
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file with these options")
    parser.add_argument("--out", type=str, required=True, help="dataset folder to create")
    parser.add_argument("--no_progress", type=bool, default=False, help="hide the progress bar")
    # Flat options (--num_videos, not --config.num_videos), documented by the dataclass fields.
    parser.add_class_arguments(SynthVidConfig, nested_key=None, as_group=True)
    try:
        cfg = parser.parse_args(argv)
        config = SynthVidConfig(**{f.name: cfg[f.name] for f in fields(SynthVidConfig)})
    except ConfigError:
        raise
    except Exception as e:  # jsonargparse's ArgumentError, or a ConfigError it wrapped
        cause = e.__cause__ or e.__context__
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(one_line(str(e))) from None
    path = generate_synthvid(cfg.out, config, progress=not cfg.no_progress)
    print(path)
    return 0


#: ``vidspec data`` subcommands: name -> (function, one-line description).
DATA_COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "synthvid": (_synthvid, "generate the SynthVid synthetic video dataset"),
}


#: entry-point group through which other installed packages add ``vidspec data`` subcommands (``name = module:fn``,
#: ``fn(argv) -> int``; its docstring's first line is the description), e.g. the training package's ``import``.
DATA_GROUP = "vidspec.data"


def _data_commands() -> dict[str, tuple[Callable[[list[str]], int], str]]:
    from importlib.metadata import entry_points

    commands = dict(DATA_COMMANDS)
    for ep in entry_points(group=DATA_GROUP):
        if ep.name not in commands:
            fn = ep.load()
            commands[ep.name] = (fn, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
    return commands


def data_main(argv: list[str]) -> int:
    """Entry point of ``vidspec data DATASET [OPTIONS]``."""
    argv = normalize_flags(list(argv))
    commands = _data_commands()
    if not argv or argv[0] in ("-h", "--help"):
        names = "\n".join(f"  {n:<10} {d}" for n, (_, d) in commands.items())
        print(f"usage: vidspec data DATASET [OPTIONS]\n\ndatasets:\n{names}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in commands:
        raise ConfigError(f"unknown dataset {name!r} (known: {', '.join(commands)})")
    return commands[name][0](rest)


if __name__ == "__main__":
    sys.exit(data_main(sys.argv[1:]))
