"""The image builder: content-hash tags (no daemon needed) and real builds against the daemon."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.errors import ImageBuildError
from gymfleet.envs.images import (
    DEFAULT_IMAGES_DIR,
    HOST_CA_BUNDLE,
    HOST_CA_NAME,
    LABEL_IMAGE_HASH,
    BuildProgress,
    ImageBuilder,
)


@pytest.fixture
def images_dir(tmp_path: Path) -> Path:
    """A copy of the real base definition (same hash, so the built base is reused) and a child."""
    root = tmp_path / "images"
    shutil.copytree(DEFAULT_IMAGES_DIR / "base", root / "base", symlinks=True)
    (root / "tiny").mkdir()
    (root / "tiny" / "Dockerfile").write_text("FROM gymfleet/base:latest\nRUN echo tiny > /tiny.txt\n")
    return root


def test_names_put_parents_first_and_find_the_terminal_image() -> None:
    names = ImageBuilder().names()
    assert names[0] == "base" and "terminal" in names
    assert ImageBuilder().definition("terminal").parents == ("base",)


def test_tag_follows_content_and_parents(images_dir: Path) -> None:
    builder = ImageBuilder(images_dir=images_dir)
    base, tiny = builder.tag("base"), builder.tag("tiny")
    assert base == ImageBuilder().tag("base")  # the folder's path is not hashed
    assert tiny.startswith("gymfleet/tiny:") and len(tiny.split(":")[1]) == 12

    (images_dir / "tiny" / "README.md").write_text("docs do not change the image")
    assert builder.tag("tiny") == tiny
    (images_dir / "tiny" / "extra.txt").write_text("a file in the context does")
    assert builder.tag("tiny") != tiny and builder.tag("base") == base

    tiny = builder.tag("tiny")
    (images_dir / "base" / "base.yaml").write_text("suite: trixie\n")
    assert builder.tag("base") != base and builder.tag("tiny") != tiny


def test_unknown_image_and_cycles_are_clear_errors(images_dir: Path) -> None:
    builder = ImageBuilder(images_dir=images_dir)
    with pytest.raises(ImageBuildError, match=r"no image 'nope'.*known: base, tiny"):
        builder.tag("nope")
    (images_dir / "a").mkdir()
    (images_dir / "a" / "Dockerfile").write_text("FROM gymfleet/b\n")
    (images_dir / "b").mkdir()
    (images_dir / "b" / "Dockerfile").write_text("FROM gymfleet/a\n")
    with pytest.raises(ImageBuildError, match="cycle"):
        builder.tag("a")


def test_context_pins_the_parent_and_carries_the_ca_bundle_when_asked(images_dir: Path) -> None:
    builder = ImageBuilder(images_dir=images_dir)
    (images_dir / "tiny" / "Dockerfile").write_text(
        f"FROM gymfleet/base:latest AS build\nCOPY {HOST_CA_NAME} /usr/local/share/ca-certificates/\n"
    )
    with tarfile.open(fileobj=builder._context(builder.definition("tiny"))) as tar:
        dockerfile = tar.extractfile("Dockerfile").read().decode()  # type: ignore[union-attr]
        assert dockerfile.startswith(f"FROM {builder.tag('base')} AS build\n")
        assert tar.extractfile(HOST_CA_NAME).read() == HOST_CA_BUNDLE.read_bytes()  # type: ignore[union-attr]


@pytest.mark.docker
def test_second_build_is_a_no_op(terminal_image: str, images_dir: Path) -> None:
    assert ImageBuilder().ensure("terminal").built is False
    assert ImageBuilder().ensure("terminal").tag == terminal_image

    logs: list[str] = []
    builder = ImageBuilder(images_dir=images_dir, log=logs.append)
    first = builder.ensure("tiny", force=True)
    try:
        assert first.built and logs[0].startswith("building ") and logs[-1].startswith(f"built {first.tag} in ")
        second = builder.ensure("tiny")
        assert second.built is False and second.tag == first.tag
        image = builder.client.images.get(first.tag)
        assert image.labels[LABEL_IMAGE_HASH] == builder.content_hash("tiny")
        assert builder.client.images.get("gymfleet/tiny:latest").id == image.id
    finally:
        builder.client.images.remove(first.tag, force=True)
        builder.client.images.remove("gymfleet/tiny:latest", force=True)


@pytest.mark.docker
def test_broken_dockerfile_raises_with_the_log_tail(terminal_image: str, images_dir: Path) -> None:
    (images_dir / "tiny" / "Dockerfile").write_text(
        "FROM gymfleet/base:latest\nRUN echo step-that-fails && exit 7\n"
    )
    with pytest.raises(ImageBuildError) as failure:
        ImageBuilder(images_dir=images_dir).ensure("tiny")
    message = str(failure.value)
    assert "step-that-fails" in message and "7" in message
    assert "gymfleet images build tiny" in message and "last lines of the build log" in message


def test_context_tar_is_readable_without_ca(images_dir: Path) -> None:
    builder = ImageBuilder(images_dir=images_dir)
    with tarfile.open(fileobj=io.BytesIO(builder._context(builder.definition("tiny")).getvalue())) as tar:
        assert sorted(tar.getnames()) == ["Dockerfile"]


def test_cli_build_of_an_unknown_image_fails_with_the_known_ones(images_dir: Path) -> None:
    result = CliRunner().invoke(app, ["images", "build", "nope", "--images-dir", str(images_dir)])
    assert result.exit_code == 1
    assert "no image 'nope'" in result.output and "base, tiny" in result.output


@pytest.mark.docker
def test_cli_list_and_build_when_up_to_date(terminal_image: str) -> None:
    listed = CliRunner().invoke(app, ["images", "list"])
    assert listed.exit_code == 0 and terminal_image in listed.output
    built = CliRunner().invoke(app, ["images", "build", "terminal"])
    assert built.exit_code == 0 and f"{terminal_image} up to date" in built.output


def test_a_build_nobody_watches_prints_plain_progress_lines() -> None:
    """`envs check` built images for ~100 s without a line: the default log of a build prints
    the builder's lines and docker's steps as they come, the rest at most once per interval."""
    out, now = io.StringIO(), [0.0]
    progress = BuildProgress("terminal", interval_s=10.0, out=out, clock=lambda: now[0])
    for t, line in [(0, "building gymfleet/terminal:abc (missing here: built once, minutes)"),
                    (1, "Step 1/4 : FROM gymfleet/base:def"), (2, " ---> 1234"), (3, "Get:1 http://deb ..."),
                    (4, "Step 2/4 : RUN apt-get install -y python3"), (5, "Unpacking python3 ..."),
                    (16, "Setting up python3 ..."), (17, "more output"), (40, "built gymfleet/terminal:abc in 40 s")]:
        now[0] = t
        progress(line)
    assert out.getvalue().splitlines() == [
        "image terminal (0 s): building gymfleet/terminal:abc (missing here: built once, minutes)",
        "image terminal (1 s): Step 1/4 : FROM gymfleet/base:def",
        "image terminal (4 s): Step 2/4 : RUN apt-get install -y python3",
        "image terminal (16 s): Setting up python3 ...",
        "image terminal (40 s): built gymfleet/terminal:abc in 40 s",
    ]
