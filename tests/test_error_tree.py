"""The tree drawn in ``bot/errors.py``'s docstring is the tree in the code.

Every subclass of ``OpsloopError`` defined in ``bot`` or ``tools`` (found by importing
every product module) is in the drawing, under its real base class; one that lives
outside ``bot/errors.py`` names its module on its line, one that does not lives in
``bot/errors.py``; and the drawing names no class that does not exist.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from types import ModuleType

import bot
import bot.errors
import tools
from bot.errors import OpsloopError

PRODUCT: tuple[ModuleType, ...] = (bot, tools)
# "    │   ├── StoreConflict      bot/store/connection.py: a write refused ..."
ENTRY = re.compile(r"^(?P<lead>[ │]*)(?:[├└]── )?(?P<name>[A-Z]\w+)(?:\s+(?P<path>[\w/]+\.py):)?")


@dataclass(frozen=True)
class Drawn:
    parent: str | None
    path: str  # the module file the drawing says the class lives in


def drawn_tree() -> dict[str, Drawn]:
    doc = bot.errors.__doc__ or ""
    lines = doc.split("\n\n")[1].splitlines()  # the paragraph after the summary line
    tree: dict[str, Drawn] = {}
    at_column: dict[int, str] = {}  # name column → the latest class drawn there
    for line in lines:
        match = ENTRY.match(line)
        if match is None:
            continue  # a continuation line ("│   │   token, ...")
        connector = "──" in line[: match.start("name")]
        column = match.start("name")
        parent = at_column.get(column - 4) if connector else None
        tree[match["name"]] = Drawn(parent, match["path"] or "bot/errors.py")
        at_column[column] = match["name"]
    return tree


def product_errors() -> list[type[OpsloopError]]:
    for package in PRODUCT:
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not module.name.endswith(".__main__"):  # running it is the CLI
                importlib.import_module(module.name)
    found: list[type[OpsloopError]] = []
    todo: list[type[OpsloopError]] = [OpsloopError]
    while todo:
        cls = todo.pop()
        if cls.__module__.split(".")[0] in {package.__name__ for package in PRODUCT}:
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_the_drawing_is_a_tree_rooted_at_opsloop_error() -> None:
    tree = drawn_tree()
    roots = [name for name, drawn in tree.items() if drawn.parent is None]
    assert roots == ["OpsloopError"]


def test_every_product_error_is_drawn_under_its_base_where_it_lives() -> None:
    tree = drawn_tree()
    for cls in product_errors():
        assert cls.__name__ in tree, f"{cls.__module__}.{cls.__name__} is not in bot/errors.py"
        drawn = tree[cls.__name__]
        if cls is not OpsloopError:
            assert drawn.parent == cls.__bases__[0].__name__, cls
        assert drawn.path == cls.__module__.replace(".", "/") + ".py", cls


def test_every_drawn_error_exists() -> None:
    names = {cls.__name__ for cls in product_errors()}
    assert set(drawn_tree()) - names == set()
