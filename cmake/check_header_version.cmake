# normjit_check_header_version(header version): fails unless the header's NORMJIT_VERSION_MAJOR,
# _MINOR and _PATCH spell version. CMakeLists.txt calls it with the project's version (the
# library's normjit_version() is the header's numbers; the soname and normjitConfigVersion.cmake
# the project's); tests/CMakeLists.txt runs it as a script with a wrong one:
#   cmake -DHEADER=normjit.h -DVERSION=0.1.0 -P check_header_version.cmake
function(normjit_check_header_version header version)
  file(STRINGS "${header}" defines REGEX "^#define NORMJIT_VERSION_(MAJOR|MINOR|PATCH) ")
  set(numbers "")
  foreach(part MAJOR MINOR PATCH)
    if(NOT defines MATCHES "#define NORMJIT_VERSION_${part} +([0-9]+)")
      message(FATAL_ERROR "${header}: no '#define NORMJIT_VERSION_${part} <number>'")
    endif()
    list(APPEND numbers ${CMAKE_MATCH_1})
  endforeach()
  list(JOIN numbers "." numbers)
  if(NOT numbers STREQUAL version)
    message(FATAL_ERROR "${header} says version ${numbers} (NORMJIT_VERSION_MAJOR, _MINOR, "
            "_PATCH) but the project is ${version} (project(normjit VERSION ...) in "
            "CMakeLists.txt): change both, and pyproject.toml and python/normjit/__init__.py too")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  normjit_check_header_version("${HEADER}" "${VERSION}")
endif()
