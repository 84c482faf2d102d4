"""Where the launcher puts the hidden ``--exit-with-parent`` option in a role's command line."""

from __future__ import annotations

from elasticps.launch.parent_watch import with_parent


def test_the_option_goes_right_after_elasticps_before_the_role() -> None:
    argv = ("/usr/bin/python3", "-m", "elasticps", "-v", "trainer", "train.py", "-m", "x")
    assert with_parent(argv, 4711) == (
        "/usr/bin/python3", "-m", "elasticps", "--exit-with-parent=4711", "-v", "trainer",
        "train.py", "-m", "x")


def test_a_command_that_is_not_elasticps_is_left_alone() -> None:
    argv = ("/usr/bin/python3", "-c", "print('elasticps')")
    assert with_parent(argv, 4711) == argv
