"""The one ``vidspec`` command.

Each installed vidspec package contributes subcommands through the ``vidspec.commands`` entry
point group; an entry point names a function ``main(argv: list[str]) -> int | None``. So
``vidspec generate ...`` comes from decoding, ``vidspec data ...`` and ``vidspec eval ...`` from
evaluation, ``vidspec train ...`` from draft_training, and decoding never imports them.

Usage::

    vidspec --help
    vidspec generate --target tiny-qwen2.5-vl --video clip.mp4 --prompt "Describe the video."
    vidspec --debug generate ...      # show tracebacks of user errors
    vidspec generate --no-verify ...  # skip the weights' fingerprint check (vidspec.decoding.integrity)

Errors a user can cause (:class:`~vidspec.decoding.errors.VidspecError`) exit with status 2 and
one line on stderr; ``--debug`` re-raises them with the traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from importlib.metadata import entry_points

from vidspec.decoding import interrupts
from vidspec.decoding.errors import VidspecError
from vidspec.decoding.fsutil import describe_fs_error, is_user_fs_error

GROUP = "vidspec.commands"


def _commands() -> dict:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def _usage(commands: dict) -> str:
    names = "\n".join(f"  {n}" for n in sorted(commands))
    return (
        "usage: vidspec [--debug] [--no-verify] COMMAND [ARGS...]\n\n"
        "Speculative decoding for Video-LLMs.\n\ncommands:\n"
        f"{names}\n\nRun 'vidspec COMMAND --help' for a command's options."
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = False
    while argv and argv[0] in ("--debug", "-v", "--verbose"):
        debug = True
        argv.pop(0)
    debug = debug or os.environ.get("VIDSPEC_DEBUG") == "1"
    if "--debug" in argv[1:]:  # also accepted after the command name
        argv.remove("--debug")
        debug = True
    if "--no-verify" in argv:  # any command: load weights whose manifest fingerprint does not match
        argv.remove("--no-verify")
        os.environ["VIDSPEC_NO_VERIFY"] = "1"  # read by vidspec.decoding.integrity
    if debug:
        os.environ["VIDSPEC_DEBUG"] = "1"  # libraries below may show native logs too
    else:
        # Weight-loading progress bars of transformers/huggingface_hub are noise for a CLI user.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        _disable_loaded_progress_bars()
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    level = os.environ.get("VIDSPEC_LOG_LEVEL", "").upper()
    if level and not debug:  # vidspec's own loggers only (e.g. INFO: the eval's stage timings), not the libraries'
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            print(f"vidspec: error: VIDSPEC_LOG_LEVEL={level!r} (use DEBUG, INFO, WARNING or ERROR)", file=sys.stderr)
            return 2
        logging.getLogger("vidspec").setLevel(level)
    commands = _commands()
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(commands))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in commands:
        print(f"vidspec: error: unknown command {name!r} (known: {', '.join(sorted(commands))})", file=sys.stderr)
        return 2
    interrupts.install()
    try:
        fn = commands[name].load()
        code = fn(rest)
        interrupts.raise_if_interrupted()  # a Ctrl-C that a finaliser swallowed still ends the run with 130
    except VidspecError as e:
        if debug:
            raise
        print(f"vidspec {name}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"vidspec {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`vidspec generate ... | head`): stop quietly as Unix tools do. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE
    except OSError as e:  # a read-only folder, missing permissions, a full disk: the path and the cause
        if debug or not is_user_fs_error(e):
            raise
        print(f"vidspec {name}: error: {describe_fs_error(e)}", file=sys.stderr)
        return 2
    return int(code or 0)


def _disable_loaded_progress_bars() -> None:
    # The environment variable only counts before those libraries are imported; when main() runs
    # inside a process that already imported them (tests, notebooks) switch them off directly.
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def one_line(msg: object, default: str = "invalid arguments", limit: int = 600) -> str:
    """Fold a (possibly multi-line) parser or library message into the one line the CLI prints."""
    lines = [ln.strip(" -") for ln in str(msg).strip().splitlines() if ln.strip(" -")]
    text = "; ".join(lines) if lines else default
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_function(fn, prog: str, argv: list[str]) -> int:
    """Parse ``argv`` into the keyword arguments of ``fn`` (its signature and docstring make the CLI) and call it.

    For subcommands whose options are exactly one function's parameters; ``--foo-bar`` and
    ``--foo_bar`` both work (:func:`normalize_flags`).
    """
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(prog=prog, description=fn.__doc__.splitlines()[0] if fn.__doc__ else None)
    parser.add_function_arguments(fn, as_positional=False)
    cfg = parser.parse_args(normalize_flags(argv))
    return fn(**{k: v for k, v in vars(cfg).items() if not k.startswith("_") and k != "config"})


def normalize_flags(argv: list[str]) -> list[str]:
    """Accept ``--max-new-tokens`` as well as ``--max_new_tokens`` (jsonargparse uses the latter).

    Every token that starts with ``--`` is taken as an option name and its dashes become
    underscores (the part after ``=`` is kept as it is). A value that itself starts with ``--``
    must therefore be given as ``--option=--value``.
    """
    out = []
    for tok in argv:
        if tok.startswith("--") and len(tok) > 2 and tok[2] != "-":
            name, eq, value = tok[2:].partition("=")
            out.append("--" + name.replace("-", "_") + eq + value)
        else:
            out.append(tok)
    return out


if __name__ == "__main__":
    sys.exit(main())
