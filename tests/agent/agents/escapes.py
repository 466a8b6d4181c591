"""Reaches outside the worktree in the way its second argument names:

- symlink: adds a link to a directory outside the worktree (and fixes the code);
- outside: writes a file beside the worktree, through a relative path;
- dotgit: points the worktree's .git file at another repository."""

import os
import sys
from pathlib import Path

how = sys.argv[2]
Path("shop/cart.py").write_text(Path("shop/cart.py").read_text() + "\n# touched\n")
if how == "symlink":
    os.symlink("/etc", "shop/system")
    os.symlink("../../../../outside", "shop/up")
elif how == "outside":
    Path("../escaped.txt").write_text("written outside the worktree\n")
    print("wrote", Path("../escaped.txt").resolve())
elif how == "dotgit":
    Path(".git").write_text("gitdir: /tmp/not-this-repository\n")
