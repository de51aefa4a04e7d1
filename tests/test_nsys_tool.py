from __future__ import annotations

import subprocess

from nsys_tool import find_nsys, requires_nsys


@requires_nsys
def test_nsys_version_is_2023_4() -> None:
    nsys = find_nsys()
    assert nsys is not None
    proc = subprocess.run(
        [nsys, "--version"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2023.4" in proc.stdout, proc.stdout
