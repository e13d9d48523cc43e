"""`gymfleet view`: bad stores are one line and exit 2; the command is registered."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gymfleet.cli import app


def test_a_missing_store_or_runs_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    for args in (["--store", str(tmp_path / "none.db")], ["--runs-dir", str(tmp_path / "none")],
                 ["--store", "mysql://x/y"]):
        result = runner.invoke(app, ["view", *args])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output and result.output.count("error:") == 1
    assert not (tmp_path / "none.db").exists()  # reading never creates a store


def test_view_is_a_command() -> None:
    result = CliRunner().invoke(app, ["view", "--help"])
    assert result.exit_code == 0 and "--runs-dir" in result.output and "127.0.0.1" in result.output


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    (tmp_path / "runs").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["view", "--runs-dir", str(tmp_path / "runs"), "--port", str(port)])
    assert result.exit_code == 2 and "cannot listen on 127.0.0.1" in result.output and "--port" in result.output
