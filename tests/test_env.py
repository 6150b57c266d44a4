import subprocess

from tritonkit._env import git_info


def test_git_sha_from_the_environment_wins_over_a_checkout(monkeypatch, tmp_path):
    # a copy of the tree on the GPU machine can carry a stale .git: the sha the caller names is the tree's
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(tmp_path),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "stale",
        ],
        check=True,
    )
    stale = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    monkeypatch.delenv("TRITONKIT_GIT_SHA", raising=False)
    assert git_info(tmp_path) == (stale, False)
    monkeypatch.setenv("TRITONKIT_GIT_SHA", "4ec9a8a")
    assert git_info(tmp_path) == ("4ec9a8a", None)


def test_no_checkout_and_no_environment_is_unknown(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITONKIT_GIT_SHA", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_info(tmp_path) == (None, None)


def test_blank_environment_and_a_checkout_without_objects_are_unknown(monkeypatch, tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(tmp_path),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ],
        check=True,
    )
    monkeypatch.setenv("TRITONKIT_GIT_SHA", " \n")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_info(tmp_path)[0] is not None  # blank: not a sha, so git answers
    import shutil

    shutil.rmtree(tmp_path / ".git" / "objects")
    (tmp_path / ".git" / "objects").mkdir()
    assert git_info(tmp_path) == (None, None)
