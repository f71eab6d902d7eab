/* A file compiled into the binary (cmake/EmbedFiles.cmake, lg_embed_files
 * with TABLE): its name and its bytes [begin, end). Tables of them end with
 * an entry whose name is null. Plain C, for the generated table. */
#pragma once

#ifdef __cplusplus
#include <cstddef>
#include <string_view>
extern "C" {
#endif

struct lg_embedded_file {
  const char* name;
  const char* begin;
  const char* end;
};

#ifdef __cplusplus
}

inline std::string_view embeddedBytes(const lg_embedded_file& f) {
  return std::string_view(f.begin, static_cast<size_t>(f.end - f.begin));
}
#endif
