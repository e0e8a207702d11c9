"""A server stopped with SIGTERM saves what it learned (eighteenth newcomer pass: `pkill` on `run.sh demo` lost the
online CSD memory of csd[memory_mode=online] runs, which is saved by an exit hook that SIGTERM's default skipped)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

SERVER = textwrap.dedent(
    """
    import atexit, sys
    import gradio as gr
    from workbench.ui import launch

    out, port = sys.argv[1], int(sys.argv[2])
    atexit.register(lambda: open(out, "w").write("saved"))  # as core.memory and the suffix corpus save at exit
    with gr.Blocks() as demo:
        gr.Markdown("hello")
    launch(demo, server_name="127.0.0.1", server_port=port, quiet=True)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is a POSIX signal")
def test_sigterm_ends_the_server_and_runs_the_exit_hooks(tmp_path):
    """Mutation caught: launch without its SIGTERM handler (the process dies by the signal, the hook never runs)."""
    saved = tmp_path / "saved.txt"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(saved), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, up = time.monotonic() + 120, False
        while not up and proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                up = True
            except OSError:
                time.sleep(0.5)
        assert up, "the server did not start"
        time.sleep(1.0)  # in Gradio's blocking loop
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        output = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, (code, output)
    assert saved.read_text() == "saved"
