"""`gymfleet images build|list`: the container images under images/, tagged by content hash."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import docker.errors
import typer
from rich.console import Console
from rich.table import Table

from gymfleet.envs.errors import ImageBuildError
from gymfleet.envs.images import ImageBuilder

images_app = typer.Typer(no_args_is_help=True, help="Container images (images/<name>/).")


def console() -> Console:
    """A console sized for the terminal at the time of the call (a module-level one would keep the
    width of whatever first imported this lazily loaded module)."""
    return Console()

ImagesDir = Annotated[Path | None, typer.Option(help="Folder of image folders (default: the repo's images/).")]


@images_app.command("build")
def build(
    name: Annotated[str | None, typer.Argument(help="Image to build (default: all).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if the tag exists.")] = False,
    images_dir: ImagesDir = None,
) -> None:
    """Builds an image (and its missing parents) unless its content-hash tag already exists."""
    builder = ImageBuilder(images_dir=images_dir, log=lambda line: console().print(line, style="dim", markup=False))
    try:
        names = [name] if name else builder.names()
        for image in names:
            with console().status(f"building {image}"):
                ref = builder.ensure(image, force=force)
            console().print(f"[bold]{ref.tag}[/] {'built' if ref.built else 'up to date'}")
    except ImageBuildError as exc:
        console().print(f"[red]{exc}[/]", markup=True, highlight=False)
        raise typer.Exit(1) from None


@images_app.command("list")
def list_images(images_dir: ImagesDir = None) -> None:
    """Lists the images, their current tags and whether each is built."""
    builder = ImageBuilder(images_dir=images_dir)
    table = Table("name", "parents", "tag", "built", "size MB")
    table.columns[2].no_wrap = True  # whole tags: they are copied into commands
    try:
        for name in builder.names():
            tag = builder.tag(name)
            try:
                size = f"{builder.client.images.get(tag).attrs['Size'] / 1e6:.0f}"
                built = "yes"
            except docker.errors.ImageNotFound:
                size, built = "", "no"
            table.add_row(name, ", ".join(builder.definition(name).parents), tag, built, size)
            table.columns[2].min_width = max(table.columns[2].min_width or 0, len(tag))
    except ImageBuildError as exc:
        console().print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(1) from None
    console().print(table)
