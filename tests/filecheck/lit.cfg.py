# lit configuration: every *.test file here is a RUN line over `normjit dump` piped into
# LLVM FileCheck; one property per file.
import os

import lit.formats

config.name = "normjit-filecheck"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test"]
config.test_source_root = config.normjit_test_source
config.test_exec_root = config.normjit_test_exec
# RUN lines say `normjit` and `FileCheck`: put the built tool and LLVM's FileCheck first on PATH.
config.environment["PATH"] = os.pathsep.join(
    [os.path.dirname(config.normjit_tool), os.path.dirname(config.filecheck),
     config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["NORMJIT_CACHE_DIR"] = os.path.join(config.normjit_test_exec, "cache")
