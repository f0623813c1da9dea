# The version `sluice --version`, `sluiced --version` and /metrics' sluice_build_info show:
# project(VERSION), and `git describe` when the source is a git checkout and git is installed
# (read once, at configure time: a tarball or a machine without git builds with none).
set(SLUICE_GIT_DESCRIBE "")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --tags --always --dirty
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE SLUICE_GIT_DESCRIBE
                  OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE git_result
                  ERROR_QUIET)
  if(NOT git_result EQUAL 0)
    set(SLUICE_GIT_DESCRIBE "")
  endif()
endif()
set(SLUICE_VERSION_TEXT "${PROJECT_VERSION}")
if(SLUICE_GIT_DESCRIBE)
  string(APPEND SLUICE_VERSION_TEXT " (git ${SLUICE_GIT_DESCRIBE})")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/version.h.in
               ${PROJECT_BINARY_DIR}/generated/sluice_build/version.h @ONLY)
# Header only; linked by the two programs and the server library (its /metrics).
add_library(sluice_version INTERFACE)
target_include_directories(sluice_version INTERFACE ${PROJECT_BINARY_DIR}/generated)
