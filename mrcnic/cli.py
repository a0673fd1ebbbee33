"""The ``mrcnic`` command line (click).

Sub-commands are thin: each parses its options and calls into the package
(``mrcnic.sim``, ``mrcnic.fw``, ``mrcnic.boards``) where the work is done and
tested.  Contract: ../shared/DESIGN.md "Command line".
"""

import sys

import click

from . import __version__

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mrcnic")
def main():
    """mrcnic: an open NIC for MRC (Multipath Reliable Connection)."""


def _fail(message: str):
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
