"""Hipifies the mxfuse sources for the CMake ROCm build, as torch's BuildExtension does for
setup.py. hipify rewrites files next to where they are, so csrc/ is first copied into the build
tree (the source tree stays untouched). Prints the path of each hipified source, one per line.

usage: hipify_sources.py REPO_ROOT OUT_DIR SOURCE...
"""

import contextlib
import os
import shutil
import sys

from torch.utils.hipify import hipify_python

root, out, *sources = sys.argv[1:]
shutil.rmtree(os.path.join(out, "csrc"), ignore_errors=True)
shutil.copytree(os.path.join(root, "csrc"), os.path.join(out, "csrc"))
copies = [os.path.join(out, os.path.relpath(s, root)) for s in sources]
with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the list of paths
    result = hipify_python.hipify(
        project_directory=out,
        output_directory=out,
        includes=[os.path.join(out, "*")],
        extra_files=copies,
        show_detailed=False,
        show_progress=False,
        is_pytorch_extension=True,
        hipify_extra_files_only=True,
    )
for c in copies:
    r = result.get(c)
    print(r.hipified_path if r is not None and r.hipified_path else c)
