"""Command line: look at traces without Jupyter, merge shards, open the course.

Usage::

    vizdist summary run.json          # the split, step by step, and the findings
    vizdist merge shards/ merged.json # join per-worker shards (worker-<type>-<index>.json) into one trace
    vizdist merge --skip-bad shards/ merged.json  # ... leaving out files that are not readable traces
    vizdist lab                       # open the notebook course in JupyterLab (loopback only)

A file that is not a readable trace is a one-line error and exit status 2,
never a traceback. Text taken from a trace (device names, file names,
results) is printed with terminal control characters escaped (``\\x1b``),
so a trace cannot move the cursor, clear the screen or retitle the window.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import warnings
from pathlib import Path

from vizdist._clip import MAX_LINE, clip
from vizdist.errors import TraceFormatError
from vizdist.trace import SHARD_NAME, load_trace

# C0 and C1 control characters (but newline and tab) and the bidirectional overrides/isolates,
# which can reorder what a terminal shows: printed escaped.
_BIDI = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (0x09, 0x0A)}
_ESCAPES.update({c: f"\\u{c:04x}" for c in _BIDI})


def printable(text: str) -> str:
    """``text`` with terminal control characters escaped (newlines and tabs kept).

    Example:
        >>> printable("a\\x1b[2Jb\\n")
        'a\\\\x1b[2Jb\\n'
    """
    return text.translate(_ESCAPES)


_SKIP_HELP = "in a folder, merge the readable shards and list the others (default: stop at the first bad one)"


def _say(text: str, *, err: bool = False) -> None:
    """Print ``text`` escaped, each line cut at :data:`vizdist._clip.MAX_LINE` characters (saying so)."""
    lines = (clip(line, MAX_LINE) for line in printable(text).split("\n"))
    print("\n".join(lines), file=sys.stderr if err else sys.stdout)


def _summary(args: argparse.Namespace) -> int:
    import pandas as pd

    from vizdist.diagnose import diagnose
    from vizdist.render.explorer import split_text
    from vizdist.render.layout import split_layout

    trace = load_trace(args.path, errors="skip" if args.skip_bad else "raise", **_bounds(args))
    findings = diagnose(trace)
    _say(split_text(split_layout(trace, max_steps=args.max_steps), findings))
    with pd.option_context("display.max_colwidth", None, "display.width", 200):
        for row in findings.head(_MAX_FINDINGS).itertuples(index=False):
            where = f" step {row.step}" if row.step >= 0 else ""
            _say(f"- {row.severity} {row.code}{where}: {clip(row.message, 2_000)}")
    if len(findings) > _MAX_FINDINGS:
        _say(f"- ... and {len(findings) - _MAX_FINDINGS:,} more findings (vizdist.diagnose(trace) lists them all)")
    return 0


#: Findings the summary prints at most (the first ones, by step).
_MAX_FINDINGS = 200


_BOUNDS = ("max_bytes", "max_rows", "max_lanes", "max_string")


def _bounds(args: argparse.Namespace) -> dict[str, int]:
    """The load_trace bounds given on the command line (the rest keep load_trace's defaults)."""
    return {k: getattr(args, k) for k in _BOUNDS if getattr(args, k, None) is not None}


def _add_bounds(p: argparse.ArgumentParser) -> None:
    for k in _BOUNDS:
        p.add_argument("--" + k.replace("_", "-"), type=int, default=None, dest=k,
                       help=f"raise load_trace's {k} bound to read a real trace this big (default: load_trace's)")


def _merge(args: argparse.Namespace) -> int:
    out, shards = Path(args.out), Path(args.shards)
    if shards.is_dir() and SHARD_NAME.fullmatch(out.name) and out.parent.resolve() == shards.resolve():
        raise ValueError(f"{args.out!r} would replace the shard of that name in {args.shards!r} (and the next "
                         "merge would read it as one): write the merged trace under another name.")
    trace = load_trace(args.shards, errors="skip" if args.skip_bad else "raise", **_bounds(args))
    out = trace.save(args.out)
    _say(f"merged {len(trace.meta.get('shards', [1]))} shard(s), {len(trace.elements)} element rows -> {out}")
    return 0


def _lab(args: argparse.Namespace) -> int:
    notebooks = Path(args.notebooks)
    if not notebooks.exists():
        print(f"vizdist lab: no folder {str(notebooks)!r}; pass the course folder with --notebooks.",
              file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "jupyter", "lab", str(notebooks), f"--ip={args.ip}", f"--port={args.port}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return subprocess.call(cmd)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``vizdist`` command."""
    parser = argparse.ArgumentParser(prog="vizdist", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("summary", help="print a trace's split and findings")
    p.add_argument("path", help="a .json/.json.gz/.parquet trace, or a folder of shards")
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--skip-bad", action="store_true", help=_SKIP_HELP)
    _add_bounds(p)
    p.set_defaults(func=_summary)
    p = sub.add_parser("merge", help="merge a folder of per-worker trace shards into one file")
    p.add_argument("shards")
    p.add_argument("out", help="output path (.json, .json.gz or .parquet)")
    p.add_argument("--skip-bad", action="store_true", help=_SKIP_HELP)
    _add_bounds(p)
    p.set_defaults(func=_merge)
    p = sub.add_parser("lab", help="open the notebook course in JupyterLab")
    p.add_argument("--notebooks", default="notebooks")
    p.add_argument("--ip", default="127.0.0.1")
    p.add_argument("--port", default="8888")
    p.set_defaults(func=_lab)
    args = parser.parse_args(argv)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return int(args.func(args))
        except (TraceFormatError, OSError, ValueError) as exc:
            # OSError: missing or unreadable paths; ValueError: bad arguments (e.g. an output suffix).
            _say(f"vizdist {args.command}: {exc}", err=True)
            return 2
        finally:
            for w in caught:  # e.g. files load_trace skipped: their names come from the folder
                _say(f"vizdist {args.command}: warning: {w.message}", err=True)


if __name__ == "__main__":
    sys.exit(main())
