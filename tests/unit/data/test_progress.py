from __future__ import annotations

import io

from elasticps.data.progress import Progress


def test_progress_line_on_a_terminal_and_silence_elsewhere() -> None:
    shown = io.StringIO()
    bar = Progress("converting", total_bytes=1000, stream=shown, enabled=True, interval=0.0)
    bar.update(1500, 250)
    bar.finish(3000, 1000)
    text = shown.getvalue()
    assert text.startswith("\rconverting: 1,500 rows, ")
    assert "rows/s, 25.0%" in text
    assert "converting: 3,000 rows" in text
    assert "100.0%" in text
    assert text.endswith("\n")

    quiet = io.StringIO()  # not a TTY: nothing is printed by default
    silent = Progress("converting", stream=quiet)
    silent.update(10, force=True)
    silent.finish(10)
    assert quiet.getvalue() == ""
