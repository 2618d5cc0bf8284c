"""Stand-in builds for the scripts' CPU tests: a folder whose tools/normjit is a given script,
in place of a real build (scripts/ab_bench.py and scripts/plan_diff.py run BUILD/tools/normjit)."""
import stat
from pathlib import Path


def stand_in_build(root: Path, name: str, script: str) -> Path:
    """root/name, whose tools/normjit is `script` (made executable); returns the folder."""
    build = root / name
    (build / "tools").mkdir(parents=True)
    tool = build / "tools" / "normjit"
    tool.write_text(script)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return build
