"""The tests' compile server (tests/compile_server.py): a failed request is answered with its
traceback and what it wrote to stderr, and the server goes on answering; output a kernel file
writes to stdout is not taken for an answer; a server that died is replaced."""

import pytest
from codegen_harness import compile_server

pytest.importorskip("triton")


def test_a_failed_request_is_an_answer_and_the_next_one_is_served():
    server = compile_server()
    with pytest.raises(AssertionError, match="no_such_kernel_file"):
        server.ask("front", 90, "verify", [["/nonexistent/no_such_kernel_file.py", "k", {}, {}]])
    assert server.ask("front", 90, "verify", []) == []
    assert compile_server() is server


def test_what_a_kernel_file_prints_is_not_an_answer(tmp_path):
    noisy = tmp_path / "noisy.py"
    noisy.write_text("import os, sys\nos.write(1, b'no newline from C')\n"
                     "print('a line from Python')\nsys.stderr.write('said on stderr\\n')\n")
    server = compile_server()
    with pytest.raises(AssertionError, match="(?s)has no attribute 'k'.*said on stderr"):
        server.ask("front", 90, "verify", [[str(noisy), "k", {}, {}]])
    assert server.ask("front", 90, "verify", []) == []


def test_a_server_that_died_is_started_again():
    server = compile_server()
    server.proc.kill()
    server.proc.wait()
    with pytest.raises(RuntimeError, match="the compile server exited"):
        server.ask("front", 90, "verify", [])
    again = compile_server()
    assert again is not server and again.ask("front", 90, "verify", []) == []
