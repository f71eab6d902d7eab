# lg_embed_files(TARGET <target> PREFIX <symbol prefix> FILES <path>... [TABLE <symbol>])
#
# Compiles files into <target> with the assembler's .incbin, so the binary
# needs no source tree at run time (the tokenizer for `model init`, the
# dashboard's page). Each file becomes the read-only bytes between
# `<prefix>_<name>` and `<prefix>_<name>_end` (extern const char[]), where
# <name> is its file name lowercased with every character outside [a-z0-9]
# turned into '_' ("tokenizer_config.json" -> tokenizer_config_json). With
# TABLE, the generated file also defines `const struct lg_embedded_file
# <table>[]` (common/embedded_file.h): {file name, begin, end} for each file,
# in the order given, then a terminator whose name is null.
#
# A file's bytes are not in the preprocessed source, so the generated object
# depends on the files explicitly (OBJECT_DEPENDS); ccache sees `.incbin` and
# does not cache it.
function(lg_embed_files)
  cmake_parse_arguments(ARG "" "TARGET;PREFIX;TABLE" "FILES" ${ARGN})
  if(NOT ARG_TARGET OR NOT ARG_PREFIX OR NOT ARG_FILES)
    message(FATAL_ERROR "lg_embed_files: TARGET, PREFIX and FILES are required")
  endif()
  set(asm "")
  set(decls "")
  set(rows "")
  foreach(path IN LISTS ARG_FILES)
    if(path MATCHES "[\"\\\\]")
      message(FATAL_ERROR "lg_embed_files: ${path}: a path with a quote or a backslash cannot be embedded")
    endif()
    get_filename_component(name "${path}" NAME)
    string(TOLOWER "${name}" sym)
    string(REGEX REPLACE "[^a-z0-9]" "_" sym "${sym}")
    set(sym "${ARG_PREFIX}_${sym}")
    string(APPEND asm
      "    \".balign 16\\n\"\n"
      "    \".global ${sym}\\n\"\n"
      "    \"${sym}:\\n\"\n"
      "    \".incbin \\\"${path}\\\"\\n\"\n"
      "    \".global ${sym}_end\\n\"\n"
      "    \"${sym}_end:\\n\"\n")
    string(APPEND decls "extern const char ${sym}[];\nextern const char ${sym}_end[];\n")
    string(APPEND rows "    {\"${name}\", ${sym}, ${sym}_end},\n")
  endforeach()
  set(LG_EMBED_ASM "${asm}")
  set(LG_EMBED_TABLE "")
  if(ARG_TABLE)
    set(LG_EMBED_TABLE "\n#include \"common/embedded_file.h\"\n\n${decls}\nconst struct lg_embedded_file ${ARG_TABLE}[] = {\n${rows}    {0, 0, 0},\n};\n")
  endif()
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${ARG_PREFIX}_files.c")
  configure_file("${PROJECT_SOURCE_DIR}/cmake/embedded_files.c.in" "${out}" @ONLY)
  set_source_files_properties("${out}" TARGET_DIRECTORY ${ARG_TARGET} PROPERTIES OBJECT_DEPENDS "${ARG_FILES}")
  target_sources(${ARG_TARGET} PRIVATE "${out}")
endfunction()
