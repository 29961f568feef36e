"""observability.triton_log: Triton 2.51's log line formats, the logging extension's validation
(order, kinds, messages: what tritonserver answered on this machine), and the Python
logging handler. The black-box tests are in test_logging_extension.py."""

from __future__ import annotations

import logging
import os
import re
import time

import pytest
from naiad import errors
from naiad import triton_python_backend_utils as pb_utils
from naiad.observability import triton_log

DEFAULTS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}

DEFAULT_LINE = re.compile(r"([IWE])(\d{4} \d\d:\d\d:\d\d\.\d{6}) (\d+) ([^ :]+):(\d+)\] (.*)")
ISO_LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) ([IWE]) (\d+) ([^ :]+):(\d+)\] (.*)")


@pytest.fixture(autouse=True)
def fresh_settings():
    triton_log.apply(DEFAULTS)
    yield
    triton_log.apply(DEFAULTS)


def test_default_line_format(capsys):
    triton_log.write("I", "/some/where/server.py", 42, 'Started "HTTP"\nservice')
    line = capsys.readouterr().err
    assert line.endswith("\n")
    match = DEFAULT_LINE.fullmatch(line[:-1])
    assert match, line
    assert match.group(1) == "I"
    assert match.group(3) == str(os.getpid())
    assert (match.group(4), match.group(5)) == ("server.py", "42")
    # The message is a JSON string, as Triton escapes it (TritonJson::SerializeString).
    assert match.group(6) == '"Started \\"HTTP\\"\\nservice"'


def test_iso8601_line_format(capsys):
    triton_log.apply({"log_format": "ISO8601"})
    triton_log.write("W", "model.py", 7, "careful")
    match = ISO_LINE.fullmatch(capsys.readouterr().err[:-1])
    assert match
    assert match.group(2) == "W"
    assert (match.group(4), match.group(5), match.group(6)) == ("model.py", "7", '"careful"')


def test_severities_follow_the_settings(capsys):
    triton_log.apply({"log_info": False, "log_warning": False})
    for severity in ("I", "W", "E", "V"):
        triton_log.write(severity, "x.py", 1, severity)
    assert [line[0] for line in capsys.readouterr().err.splitlines()] == ["E"]
    triton_log.apply({"log_info": True, "log_verbose_level": 1})
    triton_log.write("V", "x.py", 1, "verbose")  # a verbose line is an I line
    triton_log.write("V", "x.py", 1, "deeper", level=2)  # LOG_VERBOSE(2): not at level 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("I") and lines[0].endswith('] "verbose"')


def test_log_file_gets_the_lines_and_stderr_none(tmp_path, capsys):
    path = tmp_path / "server.log"
    triton_log.apply({"log_file": str(path)})
    triton_log.write("E", "x.py", 3, "to the file")
    triton_log.write_table("server.py", 9, "+---+\n| a |\n+---+")
    assert capsys.readouterr().err == ""
    text = path.read_text()
    assert text.splitlines()[0].endswith('x.py:3] "to the file"')
    # A table is one INFO record, unescaped after its preamble (LOG_TABLE_INFO).
    assert text.splitlines()[1].endswith("server.py:9] ")
    assert text.endswith("+---+\n| a |\n+---+\n")
    assert triton_log.settings()["log_file"] == str(path)


def test_update_in_tritons_order_and_words():
    assert triton_log.update({}) == DEFAULTS
    assert (
        triton_log.update({"log_verbose_level": 2, "log_warning": None})["log_verbose_level"] == 2
    )
    cases = [
        ({"log_file": "/tmp/x.log"}, errors.Unsupported, "log file location can not be updated through network protocol"),
        ({"log_file": 1}, errors.Unsupported, "log file location can not be updated through network protocol"),
        ({"log_info": "true"}, errors.Internal, "attempt to access JSON non-boolean as boolean"),
        ({"log_error": 1}, errors.Internal, "attempt to access JSON non-boolean as boolean"),
        ({"log_verbose_level": -1}, errors.Internal, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"log_verbose_level": 1.5}, errors.Internal, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"log_verbose_level": True}, errors.Internal, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"log_verbose_level": 1 << 64}, errors.Internal, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"log_format": 1}, errors.Internal, "attempt to access JSON non-string as string"),
        ({"log_format": "iso8601"}, errors.Unavailable, "invalid argument for --log_format, got: iso8601"),
    ]  # fmt: skip
    for request, kind, message in cases:
        with pytest.raises(kind) as caught:
            triton_log.update(request)
        assert caught.value.message == message, request
    # Settings before the refused one stay applied, those after it are not (as Triton).
    with pytest.raises(errors.Unavailable):
        triton_log.update({"log_format": "x", "log_error": False, "log_verbose_level": 3})
    assert triton_log.settings()["log_error"] is False
    assert triton_log.settings()["log_verbose_level"] == 3
    with pytest.raises(errors.Internal):
        triton_log.update({"log_verbose_level": 5, "log_info": "x"})
    assert triton_log.settings()["log_verbose_level"] == 3


def test_verbose_level_is_kept_as_tritons_int32():
    for sent, kept in ((4294967297, 1), (2147483648, 0), (18446744073709551615, 0), (7, 7)):
        assert triton_log.update({"log_verbose_level": sent})["log_verbose_level"] == kept


def test_grpc_update_words():
    with pytest.raises(errors.Unsupported):
        triton_log.update({"log_file": ("string_param", "")}, grpc=True)
    cases = [
        ({"log_info": ("uint32_param", 1)}, "expect boolean for 'log_info'"),
        ({"log_verbose_level": ("bool_param", True)}, "expect int32 for 'log_verbose_level'"),
        ({"log_format": (None, None)}, "expect string for 'log_format'"),
        ({"log_format": ("string_param", "bad")}, "invalid argument for log_format, got: bad"),
    ]
    for request, message in cases:
        with pytest.raises(errors.InvalidArgument) as caught:
            triton_log.update(request, grpc=True)
        assert caught.value.message == message
    settings = triton_log.update(
        {"log_warning": ("bool_param", False), "log_format": ("string_param", "ISO8601")},
        grpc=True,
    )
    assert settings["log_warning"] is False and settings["log_format"] == "ISO8601"


def test_python_logging_records_become_triton_lines(capsys):
    handler = triton_log.TritonHandler()
    logger = logging.getLogger("naiad.test_triton_log")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        logger.error("bad %s", "thing")
        logger.warning("warned")
        logger.info("told")
        logger.debug("hidden at level 0")
        triton_log.apply({"log_verbose_level": 1})
        logger.debug("shown at level 1")
    finally:
        logger.removeHandler(handler)
    lines = capsys.readouterr().err.splitlines()
    assert [line[0] for line in lines] == ["E", "W", "I", "I"]
    assert lines[0].endswith('] "bad thing"') and "test_triton_log.py:" in lines[0]
    assert lines[3].endswith('] "shown at level 1"')


def test_a_logged_exception_is_written_with_its_traceback(capsys):
    """logger.exception(...) (what an HTTP handler's unexpected error logs) gives one E
    line whose message holds the traceback, and no "--- Logging error ---" report."""
    handler = triton_log.TritonHandler()
    logger = logging.getLogger("naiad.test_triton_log.exceptions")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise ValueError("the real error")
        except ValueError:
            logger.exception("handling failed")
        logger.error("with a stack", stack_info=True)
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "Logging error" not in err
    lines = err.splitlines()
    assert len(lines) == 2 and [line[0] for line in lines] == ["E", "E"]
    assert '] "handling failed\\nTraceback (most recent call last):\\n' in lines[0]
    assert 'raise ValueError(\\"the real error\\")' in lines[0]
    assert lines[0].endswith('ValueError: the real error"')
    assert '"with a stack\\nStack (most recent call last):' in lines[1]


def test_settings_line_carries_the_server_pid():
    line = triton_log.settings_line()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert b'"pid": %d' % os.getpid() in line


def test_follow_applies_each_line_a_worker_gets(tmp_path):
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b'{"log_verbose_level": 2, "pid": 4242}\n')
    seen = []  # the settings as each applied() call finds them

    def applied():
        seen.append(dict(triton_log.settings()))

    triton_log.follow(read_fd, applied)  # the first line synchronously, not acknowledged
    assert triton_log.settings()["log_verbose_level"] == 2 and seen == []
    os.write(write_fd, b'{"log_info": false, "log_format": "ISO8601"}\n')
    os.write(write_fd, b"not json\n")  # read and reported: acknowledged all the same
    os.close(write_fd)
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(seen) == 2
    assert seen[0]["log_info"] is False and seen[0]["log_format"] == "ISO8601"
    triton_log.apply({"pid": os.getpid()})


def test_pb_utils_logger_follows_the_settings(capsys):
    logger = pb_utils.Logger
    logger.log_info("info line")
    logger.log_warn("warn line")
    logger.log_error("error line")
    logger.log_verbose("verbose hidden")
    logger.log("plain", pb_utils.Logger.LogLevel.INFO)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("I") and lines[0].endswith('] "info line"')
    assert "test_triton_log.py:" in lines[0]
    assert lines[1].startswith("W") and lines[2].startswith("E")
    triton_log.apply({"log_warning": False, "log_verbose_level": 1})
    logger.log_warn("warn hidden")
    logger.log_verbose("verbose shown")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("I") and lines[0].endswith('"verbose shown"')


def test_a_log_file_that_cannot_be_opened_changes_nothing():
    with pytest.raises(OSError):
        triton_log.apply({"log_file": "/nonexistent-dir/naiad.log"})
    assert triton_log.settings()["log_file"] == ""


def test_log_flags_parse_as_tritonservers():
    from naiad.cli import build_parser

    parse = build_parser().parse_args
    options = parse(["serve", "--model-repository=m"])
    assert (options.log_verbose, options.log_info, options.log_warning, options.log_error) == (
        0,
        True,
        True,
        True,
    )
    assert (options.log_format, options.log_file) == ("default", "")
    options = parse(
        [
            "serve",
            "--model-repository=m",
            "--log-verbose=true",
            "--log-info=false",
            "--log-warning",
            "0",
            "--log-error=off",
            "--log-format=ISO8601",
            "--log-file=/tmp/x.log",
        ]
    )
    assert (options.log_verbose, options.log_info, options.log_warning, options.log_error) == (
        1,
        False,
        False,
        False,
    )
    assert (options.log_format, options.log_file) == ("ISO8601", "/tmp/x.log")
    assert parse(["serve", "--model-repository=m", "--log-verbose=3"]).log_verbose == 3
    for bad in ("--log-format=iso8601", "--log-verbose=loud", "--log-info=maybe"):
        with pytest.raises(SystemExit):
            parse(["serve", "--model-repository=m", bad])
