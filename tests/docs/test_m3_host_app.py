"""M3: a host application's Alembic environment takes in our branch.

The test does not restate the recipe: it reads the files and commands out of
docs/migrations.md, builds the host project in a temporary directory and runs
the commands there, so the docs and the test cannot drift apart.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import URL, create_engine, text

import alkstore_sa
from alkstore_sa.migrations._config import alembic_config

from ..conftest import ROOT

DOC = ROOT / "docs" / "migrations.md"
BIN = Path(sys.executable).parent
INI_BLOCK = "# alembic.ini, the [alembic] section"
INIT_BLOCK = "# once, if the application has no Alembic environment yet"
COMMANDS_BLOCK = "# install or upgrade the store, and apply the application's revisions"
HOOK_LINE = "        include_name=include_name,\n"


@dataclass
class Recipe:
    init: list[str]
    ini_section: str
    files: dict[str, str]  # relative path -> content
    commands: list[str]


def read_recipe() -> Recipe:
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", DOC.read_text(), flags=re.M | re.S)
    by_first_line = {b.split("\n", 1)[0]: b for b in blocks}

    def commands(block: str) -> list[str]:
        lines = (ln.strip() for ln in by_first_line[block].splitlines())
        return [ln for ln in lines if ln and not ln.startswith("#")]

    files = {
        first[2:]: block
        for first, block in by_first_line.items()
        if re.fullmatch(r"# [\w/]+\.py", first)
    }
    return Recipe(
        init=commands(INIT_BLOCK),
        ini_section=by_first_line[INI_BLOCK].split("\n", 1)[1],
        files=files,
        commands=commands(COMMANDS_BLOCK),
    )


def run(cmd: str, cwd: Path, url: URL) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "DATABASE_URL": url.render_as_string(hide_password=False),
    }
    return subprocess.run(
        shlex.split(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def edit_ini(generated: str, section: str) -> str:
    """What the docs tell a reader to do to the [alembic] section `alembic init` wrote:
    each of the recipe's settings replaces the generated line of that key, or is added."""
    lines = generated.splitlines()
    start = lines.index("[alembic]") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("["))
    for setting in section.splitlines():
        if not re.fullmatch(r"[\w.]+ = .*", setting):
            continue
        key = setting.split(" = ", 1)[0]
        at = [i for i in range(start, end) if re.match(rf"{re.escape(key)}\s*=", lines[i])]
        assert len(at) <= 1, key
        if at:
            lines[at[0]] = setting
        else:
            lines.insert(start, setting)
            end += 1
    return "\n".join(lines) + "\n"


def build_host(tmp: Path, recipe: Recipe, url: URL) -> None:
    for cmd in recipe.init:
        proc = run(cmd, tmp, url)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
    ini = tmp / "alembic.ini"
    generated = ini.read_text()
    # The docs say to replace this line, not to add a second one: it must be there.
    assert re.search(r"^path_separator = os$", generated, flags=re.M), generated
    ini.write_text(edit_ini(generated, recipe.ini_section))
    parsed = configparser.ConfigParser(interpolation=None)  # strict: a duplicate key fails
    parsed.read(ini)
    assert parsed["alembic"]["path_separator"] == "space"
    for rel, content in recipe.files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    (tmp / "myapp" / "__init__.py").touch()


def tables(url: URL) -> set[tuple[str, str]]:
    eng = create_engine(url)
    try:
        with eng.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT schemaname, tablename FROM pg_tables "
                    "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
                )
            )
            return {(r[0], r[1]) for r in rows}
    finally:
        eng.dispose()


def test_m3_recipe_is_complete_in_the_docs() -> None:
    recipe = read_recipe()
    assert set(recipe.files) == {"migrations/env.py", "myapp/models.py"}
    assert "alkstore_sa:migrations/versions" in recipe.ini_section
    assert "path_separator = space" in recipe.ini_section
    # ... and says that it replaces the line `alembic init` writes.
    assert "**replace** the\n`path_separator = os` line" in DOC.read_text()
    assert "fileConfig(context.config.config_file_name)" in recipe.files["migrations/env.py"]
    assert HOOK_LINE in recipe.files["migrations/env.py"]
    assert "alembic upgrade heads" in recipe.commands
    assert recipe.commands[-1] == "alembic check"


def test_m3_host_environment_runs_both_branches_and_autogenerate_leaves_ours(
    blank_database: URL, tmp_path: Path
) -> None:
    recipe = read_recipe()
    build_host(tmp_path, recipe, blank_database)

    ours = ScriptDirectory.from_config(alembic_config(url=blank_database)).get_heads()
    for i, cmd in enumerate(recipe.commands):
        proc = run(cmd, tmp_path, blank_database)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
        if i == 0:  # the env's fileConfig: Alembic says what it ran
            assert cmd == "alembic upgrade heads"
            # The log names each revision it ran, ending at our head.
            assert f" -> {ours[0]}, alkstore:" in proc.stderr, proc.stderr

    found = tables(blank_database)
    assert {("public", "widgets"), ("alkstore", "jobs"), ("alkstore", "dead_jobs")} <= found
    # The host's own version table tracks both heads; ours is not made here.
    assert ("public", "alembic_version") in found
    assert ("alkstore", "alkstore_alembic_version") not in found
    assert ours[0] in run("alembic current", tmp_path, blank_database).stdout

    revisions = {p.name: p.read_text() for p in (tmp_path / "migrations/versions").glob("*.py")}
    assert len(revisions) == 2, sorted(revisions)
    first = next(src for src in revisions.values() if "create widgets" in src)
    later = next(src for src in revisions.values() if "next change" in src)
    assert "op.create_table('widgets'" in first or 'op.create_table("widgets"' in first
    for src in revisions.values():
        for ours in ("jobs", "dead_jobs", "alkstore"):
            assert ours not in src
    # Autogenerate against an up-to-date database proposed nothing at all.
    upgrade_body = later.split("def upgrade()", 1)[1].split("def downgrade()", 1)[0]
    assert "op." not in upgrade_body


def test_m3_recipe_env_passes_mypy_strict(tmp_path: Path) -> None:
    recipe = read_recipe()
    for rel, content in recipe.files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    (tmp_path / "myapp" / "__init__.py").touch()
    # mypy cannot follow the import hook of an editable install: show it the
    # package as a regular install would (its py.typed makes it typed), and,
    # as for an installed package, check the recipe's files against its types
    # without reporting the package's own (which depend on the SQLAlchemy
    # version's stubs; `mypy --strict alkstore_sa` in CI checks those).
    site = tmp_path / "site"
    site.mkdir()
    (site / "alkstore_sa").symlink_to(Path(alkstore_sa.__file__).parent)
    proc = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
            "--follow-imports=silent",
            "--cache-dir", str(tmp_path / ".mypy_cache"),
            "migrations/env.py", "myapp/models.py",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "MYPYPATH": str(site)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_m3_without_the_hook_autogenerate_would_drop_our_tables(
    blank_database: URL, tmp_path: Path
) -> None:
    """The control: the recipe's include_name is what keeps our tables safe."""
    recipe = read_recipe()
    env_py = recipe.files["migrations/env.py"]
    recipe.files["migrations/env.py"] = env_py.replace(HOOK_LINE, "")
    build_host(tmp_path, recipe, blank_database)
    assert run("alembic upgrade heads", tmp_path, blank_database).returncode == 0

    proc = run("alembic check", tmp_path, blank_database)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    for table in ("jobs", "dead_jobs"):
        assert f"('remove_table', Table('{table}'" in out, out


def test_v3_recipe_env_takes_the_apps_async_url(blank_database: URL, tmp_path: Path) -> None:
    """An AsyncStore application's postgresql+asyncpg URL, given to the recipe's env.py
    as it is: `alembic upgrade heads` installs the store (it used to end in MissingGreenlet)."""
    recipe = read_recipe()
    app_url = blank_database.set(drivername="postgresql+asyncpg")
    build_host(tmp_path, recipe, app_url)
    proc = run("alembic upgrade heads", tmp_path, app_url)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    from alkstore_sa.schema import metadata

    ours = {t.name for t in metadata.tables.values()}
    assert {("alkstore", t) for t in ours} <= tables(blank_database)
