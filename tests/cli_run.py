"""``run(argv, capsys)``: the CLI in-process, as the tests of the verbs call it: ``(exit code, stdout, stderr)``."""

from whestbench.cli import main


def run(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:  # --help, version and usage errors raise SystemExit, as 0.16's argparse did
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err
