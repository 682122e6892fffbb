"""`train --precision`: TrainConfig.precision from the command line, refused before any work where it
cannot run (autocast needs a CUDA GPU; the CPU computes in float32)."""

from __future__ import annotations

import argparse

import pytest

from course_lib.cli.flags import add_model_flags, config_from_flags
from course_lib.shelf.errors import CourseError
from course_lib.shelf.model import PRECISIONS


def _config(*argv: str):
    parser = argparse.ArgumentParser()
    add_model_flags(parser)
    return config_from_flags(parser.parse_args(list(argv)))


def test_the_flag_reaches_the_config_and_defaults_to_float32():
    assert _config().precision == "float32"
    assert _config("--precision", "bfloat16").precision == "bfloat16"


def test_an_unknown_precision_is_refused_naming_the_allowed_ones(capsys):
    with pytest.raises(SystemExit):
        _config("--precision", "fp8")
    err = capsys.readouterr().err
    assert "fp8" in err and all(name in err for name in PRECISIONS)


def test_autocast_on_the_cpu_is_refused_by_the_config_check():
    with pytest.raises(CourseError, match="CUDA GPU"):
        _config("--precision", "float16", "--device", "cpu").check()
