"""`elasticps chaos [options] SCRIPT [ARGS...]`: options up to SCRIPT, the script's after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticps.chaos.cli import options_from
from elasticps.chaos.options import ORACLE_SCRIPT, ChaosOptions
from elasticps.cli import build_parser
from elasticps.errors import ConfigError


def parse(*argv: str) -> ChaosOptions:
    return options_from(build_parser().parse_args(["chaos", *argv]))


def test_everything_after_the_script_belongs_to_the_script(tmp_path: Path) -> None:
    opts = parse("--kills", "5", "--seed", "3", "--no-scale", "--gap", "0", "2", "--workdir",
                 str(tmp_path), "train.py", "--kills", "9", "--rows", "100")
    assert opts.script == Path("train.py")
    assert opts.script_args == ("--kills", "9", "--rows", "100")
    assert (opts.kills, opts.seed, opts.scale, opts.gap) == (5, 3, False, (0.0, 2.0))
    assert opts.workdir == tmp_path


def test_defaults_and_a_relative_workdir_resolved_against_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    opts = parse("train.py")
    assert opts.workdir == tmp_path / "chaos-run"
    assert (opts.kills, opts.trainers, opts.pservers, opts.lease_ttl, opts.scale,
            opts.skip_baseline) == (20, 2, 2, 2, True, False)


@pytest.mark.parametrize(("argv", "message"), [
    (("--kills", "-1"), "--kills=-1 must be >= 0"),
    (("--trainers", "0"), "--trainers=0 must be >= 1"),
    (("--lease-ttl", "0"), "--lease-ttl=0 must be >= 1"),
    (("--recovery-timeout", "0"), "--recovery-timeout=0.0 must be > 0"),
    (("--gap", "2", "1"), "0 <= MIN <= MAX"),
    (("--reshard", "2,3"), "2 pservers is no change from 2"),  # the job starts on 2
    (("--reshard", "3,3"), "3 pservers is no change from 3"),
])
def test_options_that_cannot_work_are_refused_before_anything_starts(
        tmp_path: Path, argv: tuple[str, ...], message: str) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    parse(str(script)).validate()
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse(*argv, str(script)).validate()
    with pytest.raises(ConfigError, match="does not exist"):
        parse(str(tmp_path / "missing.py")).validate()



def test_oracle_runs_its_own_script_with_a_store_outage_and_no_baseline() -> None:
    opts = parse("--oracle", "--kills", "24")
    assert opts.script == ORACLE_SCRIPT
    assert opts.script.is_file()
    assert (opts.oracle, opts.outage, opts.outage_at, opts.skip_baseline) == (True, 12.0, 12, True)
    assert parse("train.py").outage == 0.0
    with pytest.raises(ConfigError, match="give no SCRIPT"):
        parse("--oracle", "train.py")
    with pytest.raises(ConfigError, match="give the SCRIPT"):
        parse()


def test_a_streams_options_one_pass_of_the_oracles_partitions() -> None:
    opts = parse("--oracle", "--stream", "--stream-partitions", "10", "--oracle-rows", "40000",
                 "--stream-interval", "2", "--schedule", "stream-commit-master-kill")
    opts.validate()
    assert (opts.stream, opts.oracle_passes, opts.stream_rows, opts.stream_interval) == (
        True, 1, 4000, 2.0)
    assert opts.stream_bound_s == opts.progress_bound_s + 5.0
    assert parse("--oracle").oracle_passes == 3  # a dataset's default
    for argv, message in (
            (("--oracle", "--stream", "--oracle-passes", "2"), "a stream is trained once"),
            (("--oracle", "--stream", "--stream-partitions", "0"), "--stream-partitions 0"),
            (("--oracle", "--stream", "--oracle-rows", "7"), "cannot fill 8 partitions"),
            (("--oracle", "--stream", "--stream-interval", "0"), "--stream-interval=0.0"),
            (("--oracle", "--schedule", "stream-commit-master-kill"), "needs --stream")):
        with pytest.raises(ConfigError, match=message):
            parse(*argv).validate()
    script = Path(__file__)
    with pytest.raises(ConfigError, match="it needs --oracle"):
        parse("--stream", str(script)).validate()


def test_the_jobs_mode_and_checkpoint_deltas_reach_elasticps_run(tmp_path: Path) -> None:
    from elasticps.chaos.job import job_env, launch_command

    geo = parse("--oracle", "--mode", "geo")
    geo.validate()
    argv = launch_command(geo, tmp_path)
    assert argv[argv.index("--mode") + 1] == "geo"
    assert "--mode" not in launch_command(parse("--oracle"), tmp_path)  # async: as before
    sync = parse("--oracle", "--mode", "sync", "--checkpoint-deltas", "3")
    sync.validate()  # the oracle counts sync rounds too (chaos/oracle.py)
    argv = launch_command(sync, tmp_path)
    assert argv[argv.index("--mode") + 1] == "sync"
    assert job_env(sync)["PADDLE_CHECKPOINT_DELTAS"] == "3"
    assert "PADDLE_CHECKPOINT_DELTAS" not in job_env(parse("--oracle"))
    with pytest.raises(ConfigError, match="--checkpoint-deltas"):
        parse("--oracle", "--checkpoint-deltas", "-1").validate()


def test_an_unknown_schedule_is_refused_by_the_options_too(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    with pytest.raises(ConfigError, match="--schedule 'nope' is not one of"):
        ChaosOptions(script=script, schedule="nope").validate()


def test_autoscale_hands_the_trainer_count_to_the_jobs_autoscaler(tmp_path: Path) -> None:
    from elasticps.chaos.job import launch_command

    opts = parse("--oracle", "--mode", "sync", "--autoscale", "--trainers", "3")
    opts.validate()
    assert (opts.autoscale, opts.scale) == (True, False)  # the harness scales nothing itself
    argv = launch_command(opts, tmp_path)
    assert "--autoscale" in argv
    assert argv[argv.index("--max-trainers") + 1] == "4"
    assert argv[argv.index("--autoscale-cpu") + 1] == "0"
    assert "--autoscale" not in launch_command(parse("--oracle"), tmp_path)
    with pytest.raises(ConfigError, match="--no-scale"):
        ChaosOptions(script=ORACLE_SCRIPT, autoscale=True).validate()
